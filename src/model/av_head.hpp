#pragma once
// The last layer of AVNet: tokens in, loss out.
//   head.ln -> masked mean pool of audio tokens (pa) and of video tokens (pv)
//   head.cls([pa | pv]) -> cross-entropy with the labels
//   + nce_weight * symmetric InfoNCE(pa, pv) over the micro-batch at nce_temperature.
#include "backend/backend.hpp"
#include "model/layer.hpp"
#include "model/layer_norm.hpp"
#include "model/linear.hpp"
#include "model/model_config.hpp"

namespace avtrain {

class AVHead final : public Layer {
 public:
  AVHead(Backend& be, ParamStore& params, const ModelConfig& m, int num_classes);
  std::unique_ptr<LayerState> make_state() const override;
  // Train mode computes the loss gradient here too; backward then carries it to the tokens.
  void forward(Flow& flow, LayerState& state) override;
  void backward(Flow& flow, LayerState& state) override;

 private:
  Backend& be_;
  int D_, classes_;
  float tau_, nce_weight_;
  LayerNorm ln_;
  Linear cls_;
};

}  // namespace avtrain
