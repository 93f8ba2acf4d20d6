#include "model/av_head.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/label_targets.hpp"
#include "model/mixup_loss.hpp"
#include "model/saved_tensor.hpp"

namespace avtrain {

namespace {
struct HeadState final : LayerState {
  SavedTensor x, z;
  Buffer mean, rstd, dlogits, dpa, dpv;  // fp32: statistics and the loss gradients (B rows)
  Buffer dlogits_mix;                     // mixup: the partner labels' term of the loss gradient
  std::size_t bytes() const override { return total_bytes(x, z, mean, rstd, dlogits, dpa, dpv, dlogits_mix); }
};

// Workspace slots.
enum Slot { kY, kPa, kPv, kZ, kLogits };
}  // namespace

AVHead::AVHead(Backend& be, ParamStore& params, Workspace& ws, const PrecisionPolicy& policy, const ModelConfig& m,
               int num_classes)
    : Layer("head"), be_(be), ws_(ws), D_(m.width), classes_(num_classes), tau_(m.nce_temperature),
      nce_weight_(m.nce_weight), ce_weight_(m.ce_weight), multi_label_(m.task == Task::multi_label), ln_(params, "head.ln", m.width, policy.of("head.ln")),
      cls_(params, "head.cls", 2 * m.width, num_classes, m.init_std, policy.of("head.cls")) {
  require(m.nce_temperature > 0, "model.nce_temperature must be > 0");
}

std::unique_ptr<LayerState> AVHead::make_state() const { return std::make_unique<HeadState>(); }

double AVHead::forward_flops(int B, int) const {
  const double nce = nce_weight_ > 0 ? 2.0 * B * B * D_ : 0.0;  // the audio-video similarity matrix
  return 2.0 * B * 2.0 * D_ * classes_ + nce;
}

void AVHead::forward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<HeadState&>(state_base);
  const int B = flow.B, L = flow.L, D = D_, rows = B * L, Ta = flow.audio_tokens;
  const std::size_t n = std::size_t(rows) * D;
  const float* x = st.x.keep(be_, flow.x, flow.x_dtype);
  Buffer& y = ws_[kY];
  y.resize(n);
  st.mean.resize(rows);
  st.rstd.resize(rows);
  ln_.forward(be_, x, y.data(), st.mean.data(), st.rstd.data(), rows);
  note_activation(be_, flow, ln_.module(), y.data(), n);
  Buffer& pa = ws_[kPa];
  Buffer& pv = ws_[kPv];
  pa.resize(std::size_t(B) * D);
  pv.resize(std::size_t(B) * D);
  // parallel.cp: each part pools its own tokens over the sample's count, and the parts' pools add up.
  const float* counts = flow.context ? flow.pool_counts.data() : nullptr;
  be_.masked_mean_pool_forward(y.data(), flow.token_mask.data(), counts, pa.data(), B, L, D, 0, Ta);
  be_.masked_mean_pool_forward(y.data(), flow.token_mask.data(), counts ? counts + B : nullptr, pv.data(), B, L, D, Ta, L);
  if (flow.context) {
    flow.context->sum(pa.data(), pa.size());
    flow.context->sum(pv.data(), pv.size());
  }
  Buffer& z = ws_[kZ];
  z.resize(std::size_t(B) * 2 * D);
  be_.concat_columns(pa.data(), pv.data(), z.data(), B, D, D);
  Buffer16* z16 = ws_.fp8_input_for(cls_.fp8(), cls_.dtype(), 0);  // FP8: z kept as cls's E4M3 copy
  st.z.round_and_keep(be_, z, cls_.dtype(), z16);
  Buffer& logits = ws_[kLogits];
  logits.resize(std::size_t(B) * classes_);
  cls_.forward(be_, st.z.operand(), logits.data(), B, z16 ? &st.z : nullptr);
  note_activation(be_, flow, cls_.module(), logits.data(), logits.size());

  const bool training = flow.mode == Mode::train;
  st.dlogits.resize(logits.size());
  if (multi_label_) {
    multi_label_loss(logits, flow, training ? &st.dlogits : nullptr);
  } else {
    labels_.upload(flow.batch->label.data(), flow.batch->label.size());
    if (training && !flow.batch->mix_label.empty()) {
      mix_labels_.upload(flow.batch->mix_label.data(), flow.batch->mix_label.size());
      st.dlogits_mix.resize(logits.size());
      flow.ce_loss = mixup_cross_entropy(be_, logits.data(), labels_.data(), mix_labels_.data(),
                                         flow.batch->mix_weight, st.dlogits.data(), st.dlogits_mix.data(), B, classes_,
                                         flow.grad_scale * ce_weight_, &flow.correct);
    } else {
      flow.ce_loss = be_.cross_entropy(logits.data(), labels_.data(), training ? st.dlogits.data() : nullptr, B,
                                       classes_, flow.grad_scale * ce_weight_, &flow.correct);
    }
  }
  if (!training && flow.scores) append_scores(logits, flow);
  flow.nce_loss = 0;
  st.dpa.resize(std::size_t(B) * D);
  st.dpv.resize(std::size_t(B) * D);
  st.dpa.zero();
  st.dpv.zero();
  if (training && nce_weight_ != 0.0f && B > 1)
    flow.nce_loss = be_.info_nce(pa.data(), pv.data(), st.dpa.data(), st.dpv.data(), B, D, tau_,
                                 flow.grad_scale * nce_weight_);
  flow.loss = double(ce_weight_) * flow.ce_loss + double(nce_weight_) * flow.nce_loss;
}

void AVHead::multi_label_loss(const Buffer& logits, Flow& flow, Buffer* dlogits) {
  const data::MicroBatch& batch = *flow.batch;
  const bool mixed = dlogits != nullptr && !batch.mix_label.empty();
  const std::vector<float> targets = mixed_targets(batch, classes_, mixed);
  targets_.upload(targets.data(), targets.size());
  flow.ce_loss = be_.binary_cross_entropy(logits.data(), targets_.data(), dlogits ? dlogits->data() : nullptr, flow.B,
                                          classes_, flow.grad_scale * ce_weight_);
  // correct: the row's first arg-max is one of its own classes (the set of weight lambda >= 1/2).
  std::vector<float> host(logits.size());
  logits.download(host.data());
  const std::vector<std::uint8_t> sets = label_sets(batch, classes_);
  flow.correct = 0;
  for (int r = 0; r < flow.B; ++r) {
    const float* row = host.data() + std::size_t(r) * classes_;
    const auto best = std::size_t(std::max_element(row, row + classes_) - row);
    flow.correct += sets[std::size_t(r) * classes_ + best] != 0;
  }
}

// Evaluation only: the logits are copied to the host with the rows' sets of classes.
void AVHead::append_scores(const Buffer& logits, Flow& flow) const {
  const std::size_t first = flow.scores->logits.size();
  flow.scores->logits.resize(first + logits.size());
  logits.download(flow.scores->logits.data() + first);
  const std::vector<std::uint8_t> sets = label_sets(*flow.batch, classes_);
  flow.scores->targets.insert(flow.scores->targets.end(), sets.begin(), sets.end());
}

void AVHead::backward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<HeadState&>(state_base);
  const int B = flow.B, L = flow.L, D = D_, rows = B * L, Ta = flow.audio_tokens;
  const std::size_t n = std::size_t(rows) * D;
  be_.round_to(rounded(st.dlogits.data(), cls_.dtype()), st.dlogits.size());
  // parallel.cp: every part computes head.cls whole; its gradient, added over the parts with the
  // others', is counted once (1 / parts, exact for a power of two) and dz restored (parts x).
  const int parts = flow.parts();
  if (parts > 1) be_.scale(st.dlogits.data(), st.dlogits.size(), 1.0f / float(parts));
  Buffer& dz = ws_[kZ];
  dz.resize(std::size_t(B) * 2 * D);
  cls_.backward(be_, st.z.operand(), st.dlogits.data(), dz.data(), B);
  if (parts > 1) be_.scale(dz.data(), dz.size(), float(parts));
  note_gradient(be_, flow, cls_.module(), dz.data(), dz.size());
  // dpa, dpv hold the InfoNCE gradient; add the classifier's (pooling runs in fp32).
  Buffer& dcls_a = ws_[kPa];
  Buffer& dcls_v = ws_[kPv];
  be_.split_columns(dz.data(), dcls_a.data(), dcls_v.data(), B, D, D);
  be_.add(st.dpa.data(), dcls_a.data(), st.dpa.size());
  be_.add(st.dpv.data(), dcls_v.data(), st.dpv.size());
  Buffer& dy = ws_[kY];
  dy.resize(n);
  be_.fill(dy.data(), n, 0.0f);
  const float* counts = flow.context ? flow.pool_counts.data() : nullptr;
  be_.masked_mean_pool_backward(st.dpa.data(), flow.token_mask.data(), counts, dy.data(), B, L, D, 0, Ta);
  be_.masked_mean_pool_backward(st.dpv.data(), flow.token_mask.data(), counts ? counts + B : nullptr, dy.data(), B, L, D,
                                Ta, L);
  be_.round_to(rounded(dy.data(), ln_.dtype()), n);
  flow.dx.resize(n);
  ln_.backward(be_, st.x.operand(), dy.data(), st.mean.data(), st.rstd.data(), flow.dx.data(), rows);
  note_gradient(be_, flow, ln_.module(), flow.dx.data(), n);
}

}  // namespace avtrain
