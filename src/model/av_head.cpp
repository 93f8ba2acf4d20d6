#include "model/av_head.hpp"

#include "core/error.hpp"

namespace avtrain {

namespace {
struct HeadState final : LayerState {
  Buffer x, y, mean, rstd, pa, pv, z, logits, dlogits, dz, dpa, dpv;
  std::size_t bytes() const override {
    return buffer_bytes({&x, &y, &mean, &rstd, &pa, &pv, &z, &logits, &dlogits, &dz, &dpa, &dpv});
  }
};
}  // namespace

AVHead::AVHead(Backend& be, ParamStore& params, const ModelConfig& m, int num_classes)
    : Layer("head"), be_(be), D_(m.width), classes_(num_classes), tau_(m.nce_temperature),
      nce_weight_(m.nce_weight), ln_(params, "head.ln", m.width),
      cls_(params, "head.cls", 2 * m.width, num_classes, m.init_std) {
  require(m.nce_temperature > 0, "model.nce_temperature must be > 0");
}

std::unique_ptr<LayerState> AVHead::make_state() const { return std::make_unique<HeadState>(); }

void AVHead::forward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<HeadState&>(state_base);
  const int B = flow.B, L = flow.L, D = D_, rows = B * L, Ta = flow.audio_tokens;
  const std::size_t n = std::size_t(rows) * D;
  std::swap(st.x, flow.x);
  st.y.resize(n);
  st.mean.resize(rows);
  st.rstd.resize(rows);
  ln_.forward(be_, st.x.data(), st.y.data(), st.mean.data(), st.rstd.data(), rows);
  note_activation(be_, flow, ln_.module(), st.y.data(), n);
  st.pa.resize(std::size_t(B) * D);
  st.pv.resize(std::size_t(B) * D);
  be_.masked_mean_pool_forward(st.y.data(), flow.key_mask.data(), st.pa.data(), B, L, D, 0, Ta);
  be_.masked_mean_pool_forward(st.y.data(), flow.key_mask.data(), st.pv.data(), B, L, D, Ta, L);
  st.z.resize(std::size_t(B) * 2 * D);
  be_.concat_columns(st.pa.data(), st.pv.data(), st.z.data(), B, D, D);
  st.logits.resize(std::size_t(B) * classes_);
  cls_.forward(be_, st.z.data(), st.logits.data(), B);
  note_activation(be_, flow, cls_.module(), st.logits.data(), st.logits.size());

  const bool training = flow.mode == Mode::train;
  st.dlogits.resize(st.logits.size());
  flow.ce_loss = be_.cross_entropy(st.logits.data(), flow.batch->label.data(), training ? st.dlogits.data() : nullptr,
                                   B, classes_, flow.grad_scale, &flow.correct);
  flow.nce_loss = 0;
  st.dpa.resize(std::size_t(B) * D);
  st.dpv.resize(std::size_t(B) * D);
  st.dpa.zero();
  st.dpv.zero();
  if (nce_weight_ != 0.0f && B > 1)
    flow.nce_loss = be_.info_nce(st.pa.data(), st.pv.data(), st.dpa.data(), st.dpv.data(), B, D, tau_,
                                 flow.grad_scale * nce_weight_);
  flow.loss = flow.ce_loss + double(nce_weight_) * flow.nce_loss;
}

void AVHead::backward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<HeadState&>(state_base);
  const int B = flow.B, L = flow.L, D = D_, rows = B * L, Ta = flow.audio_tokens;
  st.dz.resize(std::size_t(B) * 2 * D);
  cls_.backward(be_, st.z.data(), st.dlogits.data(), st.dz.data(), B);
  // dpa, dpv hold the InfoNCE gradient; add the classifier's.
  Buffer& dcls_a = st.pa;  // pooled values are no longer needed
  Buffer& dcls_v = st.pv;
  be_.split_columns(st.dz.data(), dcls_a.data(), dcls_v.data(), B, D, D);
  be_.add(st.dpa.data(), dcls_a.data(), st.dpa.size());
  be_.add(st.dpv.data(), dcls_v.data(), st.dpv.size());
  Buffer& dy = st.y;
  be_.fill(dy.data(), dy.size(), 0.0f);
  be_.masked_mean_pool_backward(st.dpa.data(), flow.key_mask.data(), dy.data(), B, L, D, 0, Ta);
  be_.masked_mean_pool_backward(st.dpv.data(), flow.key_mask.data(), dy.data(), B, L, D, Ta, L);
  flow.dx.resize(std::size_t(rows) * D);
  ln_.backward(be_, st.x.data(), dy.data(), st.mean.data(), st.rstd.data(), flow.dx.data(), rows);
}

}  // namespace avtrain
