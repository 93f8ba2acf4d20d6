#pragma once
// Pre-LayerNorm transformer block on tokens [B, L, D] with a key-padding mask:
//   h   = x + attn.proj(MHSA(ln1(x)))        MHSA: qkv = attn.qkv(.), softmax(q k^T / sqrt(hd)) v
//   out = h + mlp.fc2(GELU(mlp.fc1(ln2(h))))
// Each module computes in its type (precision policy); the attention core (softmax in fp32) stores
// its probabilities and output in the type of attn.qkv, GELU's output in that of mlp.fc1. The
// attention core's four products take bf16 operands when attn.qkv is bf16 (tensor cores on a GPU),
// and fp32 otherwise: in fp16, dS (P times a loss-scaled gradient) falls below fp16's normal range,
// and the quickstart's grad_norm then parts from FP32 by a median 0.226 against 0.083 with fp32
// products (docs/reconcile.md).
#include "backend/backend.hpp"
#include "model/layer.hpp"
#include "model/layer_norm.hpp"
#include "model/linear.hpp"
#include "model/model_config.hpp"
#include "model/recompute.hpp"
#include "precision/precision_policy.hpp"

namespace avtrain {

class TransformerBlock final : public Layer {
 public:
  TransformerBlock(Backend& be, ParamStore& params, Workspace& ws, const PrecisionPolicy& policy,
                   const ModelConfig& m, int index, Recompute recompute = Recompute::none);
  std::unique_ptr<LayerState> make_state() const override;
  void linears(std::vector<Linear*>& out) override { out.insert(out.end(), {&qkv_, &proj_, &fc1_, &fc2_}); }
  double forward_flops(int B, int L) const override;
  void forward(Flow& flow, LayerState& state) override;
  void backward(Flow& flow, LayerState& state) override;
  // Whether a block whose attn.qkv has type `qkv` runs its attention fused on `be` (no p kept whatever
  // train.recompute says: backward recomputes it from the row statistics); what run.json reports.
  static bool attention_fused(const Backend& be, DType qkv, int head_dim);
  // The backend's words for the engine of that fused attention (Backend::attention_engine).
  static std::string attention_engine(const Backend& be, DType qkv, int head_dim) {
    return be.attention_engine(attention_products(qkv), head_dim);
  }

 private:
  struct State;  // what a micro-batch in flight keeps for backward
  // The type attention's products take: bf16 where attn.qkv is bf16, fp32 otherwise (docs/precision.md).
  static DType attention_products(DType qkv) { return qkv == DType::bf16 ? DType::bf16 : DType::f32; }
  DType attention_products() const { return attention_products(qkv_.dtype()); }
  bool fused_attention() const { return attention_fused(be_, qkv_.dtype(), hd_); }
  // Whether attention's outputs are asked for as copies alone (copy_only ctx and dqkv): where it is
  // fused and its products are in qkv's type, so the fused engines may write the 16-bit copies
  // themselves and the block reads only those.
  bool attention_copy_only() const;
  // The output gradient of `layer` at dy, to be rounded to the module's type: in a 16-bit type with
  // the workspace's 16-bit copy as its copy (the module's two products read it without packing dy
  // each; copy_only: the copy alone is the result), in fp32 the values alone.
  Output grad_output(const Linear& layer, float* dy, std::size_t count, bool copy_only = false);
  // dy (+ plus, when not null) rounded so (grad_output), in one pass; returns the Output.
  Output round_grad(const Linear& layer, float* dy, std::size_t count, const float* plus = nullptr);
  State& recomputed_state();
  // parallel.cp: the bytes of a token's Hh heads of a tensor the parts exchange in `type`.
  std::size_t head_bytes(int Hh, DType type) const { return std::size_t(Hh) * hd_ * dtype_size(type); }
  // Forward from the block's input values x, keeping in `st` what backward reads besides x. With
  // `out`, the block's output goes there and each module's output is noted (the forward proper);
  // without, the output is not computed (backward's recomputation).
  void run_forward(Flow& flow, const float* x, State& st, Buffer* out);

  Backend& be_;
  Workspace& ws_;
  int D_, H_, hd_, hidden_;
  Recompute recompute_;
  // Declared in forward order: parameters register, and layers.csv lists them, in this order.
  LayerNorm ln1_;
  Linear qkv_, proj_;
  LayerNorm ln2_;
  Linear fc1_, fc2_;
};

}  // namespace avtrain
