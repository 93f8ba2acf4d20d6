#pragma once
// The last layer of AVNet: tokens in, loss out.
//   head.ln -> masked mean pool of audio tokens (pa) and of video tokens (pv)
//   head.cls([pa | pv]) -> ce_weight * cross-entropy with the labels (under mixup, the two labels
//   weighted: model/mixup_loss.hpp); under model.task multi_label the sigmoid binary cross-entropy
//   with the sets of classes (mixed under mixup: model/label_targets.hpp)
//   + nce_weight * symmetric InfoNCE(pa, pv) over the micro-batch at nce_temperature.
// Pooling and both losses run in fp32; the logits are rounded to head.cls's type first.
#include "backend/backend.hpp"
#include "model/layer.hpp"
#include "model/layer_norm.hpp"
#include "model/linear.hpp"
#include "model/model_config.hpp"
#include "precision/precision_policy.hpp"

namespace avtrain {

class AVHead final : public Layer {
 public:
  AVHead(Backend& be, ParamStore& params, Workspace& ws, const PrecisionPolicy& policy, const ModelConfig& m,
         int num_classes);
  std::unique_ptr<LayerState> make_state() const override;
  void linears(std::vector<Linear*>& out) override { out.insert(out.end(), {&cls_}); }
  double forward_flops(int B, int L) const override;
  // Train mode computes the loss gradient here too; backward then carries it to the tokens.
  void forward(Flow& flow, LayerState& state) override;
  void backward(Flow& flow, LayerState& state) override;

 private:
  // Multi-label: the loss, its gradient (training) and `correct` (rows whose first arg-max is in their set).
  void multi_label_loss(const Buffer& logits, Flow& flow, Buffer* dlogits);
  void append_scores(const Buffer& logits, Flow& flow) const;
  Backend& be_;
  Workspace& ws_;
  int D_, classes_;
  float tau_, nce_weight_, ce_weight_;
  bool multi_label_;
  LayerNorm ln_;
  Linear cls_;
  Labels labels_;  // the micro-batch's labels in tensor memory
  Labels mix_labels_;  // mixup: the labels each row was mixed with
  Buffer targets_;     // multi-label: the binary cross-entropy's targets [B, classes]
};

}  // namespace avtrain
