#pragma once
// Pre-LayerNorm transformer block on tokens [B, L, D] with a key-padding mask:
//   h   = x + attn.proj(MHSA(ln1(x)))        MHSA: qkv = attn.qkv(.), softmax(q k^T / sqrt(hd)) v
//   out = h + mlp.fc2(GELU(mlp.fc1(ln2(h))))
#include "backend/backend.hpp"
#include "model/layer.hpp"
#include "model/layer_norm.hpp"
#include "model/linear.hpp"
#include "model/model_config.hpp"

namespace avtrain {

class TransformerBlock final : public Layer {
 public:
  TransformerBlock(Backend& be, ParamStore& params, const ModelConfig& m, int index);
  std::unique_ptr<LayerState> make_state() const override;
  void forward(Flow& flow, LayerState& state) override;
  void backward(Flow& flow, LayerState& state) override;

 private:
  Backend& be_;
  int D_, H_, hd_, hidden_;
  // Declared in forward order: parameters register, and layers.csv lists them, in this order.
  LayerNorm ln1_;
  Linear qkv_, proj_;
  LayerNorm ln2_;
  Linear fc1_, fc2_;
};

}  // namespace avtrain
