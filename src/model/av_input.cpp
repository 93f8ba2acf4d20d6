#include "model/av_input.hpp"

#include "core/error.hpp"

namespace avtrain {

namespace {
struct AVInputState final : LayerState {
  std::vector<std::uint8_t> frame_mask, audio_mask, video_mask;
  Buffer logmel, col, conv_out, bn_out, bn_mean, bn_rstd, audio_tokens, patches, video_tokens;
  Buffer d_audio, d_video, d_bn;
  std::size_t bytes() const override {
    return buffer_bytes({&logmel, &col, &conv_out, &bn_out, &bn_mean, &bn_rstd, &audio_tokens, &patches,
                         &video_tokens, &d_audio, &d_video, &d_bn}) +
           frame_mask.size() + audio_mask.size() + video_mask.size();
  }
};
}  // namespace

AVInput::AVInput(Backend& be, ParamStore& params, const ModelConfig& m, const data::SetInfo& s)
    : Layer("input"), be_(be), params_(params), g_(TokenGeometry::of(m, s)), set_(s), D_(m.width),
      frontend_(g_, m.mel_bins, s.sample_rate),
      conv_(params, "audio.conv", m.mel_bins, m.width, 3, 2, 1, m.init_std),
      bn_(params, "audio.bn", m.width),
      patch_(params, "video.patch", g_.patch_dim, m.width, m.init_std) {
  pos_ = params.add("embed", "pos", {g_.tokens, m.width}, Init::normal, m.init_std, true);
  modality_ = params.add("embed", "modality", {2, m.width}, Init::normal, m.init_std, true);
}

std::unique_ptr<LayerState> AVInput::make_state() const { return std::make_unique<AVInputState>(); }

void AVInput::forward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<AVInputState&>(state_base);
  const data::MicroBatch& mb = *flow.batch;
  const int B = mb.size, D = D_, Tf = g_.frames, Ta = g_.audio_tokens, Nv = g_.video_tokens, L = g_.tokens;
  require(mb.audio.size() == std::size_t(B) * set_.audio_samples, "internal: micro-batch audio size");

  st.frame_mask.assign(std::size_t(B) * Tf, 0);
  st.audio_mask.assign(std::size_t(B) * Ta, 0);
  st.video_mask.assign(std::size_t(B) * Nv, 0);
  flow.key_mask.assign(std::size_t(B) * L, 0);
  for (int b = 0; b < B; ++b) {
    const int nf = g_.valid_frames(mb.audio_len[b]), na = g_.valid_audio_tokens(mb.audio_len[b]);
    const int nv = g_.valid_video_tokens(mb.video_len[b]);
    for (int t = 0; t < nf; ++t) st.frame_mask[std::size_t(b) * Tf + t] = 1;
    for (int t = 0; t < na; ++t) st.audio_mask[std::size_t(b) * Ta + t] = flow.key_mask[std::size_t(b) * L + t] = 1;
    for (int t = 0; t < nv; ++t) st.video_mask[std::size_t(b) * Nv + t] = flow.key_mask[std::size_t(b) * L + Ta + t] = 1;
  }

  // Audio branch.
  st.logmel.resize(std::size_t(B) * Tf * frontend_.mel_bins());
  frontend_.forward(be_, mb.audio.data(), set_.audio_samples, st.frame_mask.data(), st.logmel.data(), B);
  st.col.resize(std::size_t(B) * Ta * conv_.col_width());
  st.conv_out.resize(std::size_t(B) * Ta * D);
  conv_.forward(be_, st.logmel.data(), st.col.data(), st.conv_out.data(), B, Tf);
  note_activation(be_, flow, conv_.module(), st.conv_out.data(), st.conv_out.size());
  st.bn_out.resize(std::size_t(B) * Ta * D);
  st.bn_mean.resize(D);
  st.bn_rstd.resize(D);
  bn_.forward(be_, st.conv_out.data(), st.audio_mask.data(), st.bn_out.data(), st.bn_mean.data(),
              st.bn_rstd.data(), B * Ta, flow.mode == Mode::train);
  st.audio_tokens.resize(std::size_t(B) * Ta * D);
  be_.gelu_forward(st.bn_out.data(), st.audio_tokens.data(), st.audio_tokens.size());
  note_activation(be_, flow, bn_.module(), st.audio_tokens.data(), st.audio_tokens.size());

  // Video branch.
  st.patches.resize(std::size_t(B) * Nv * g_.patch_dim);
  be_.video_patches(mb.video.data(), st.patches.data(), B, set_.frames, set_.height, set_.width,
                    set_.channels, g_.tubelet_frames, g_.patch);
  st.video_tokens.resize(std::size_t(B) * Nv * D);
  patch_.forward(be_, st.patches.data(), st.video_tokens.data(), B * Nv);
  be_.mask_rows(st.video_tokens.data(), st.video_mask.data(), B * Nv, D);
  note_activation(be_, flow, patch_.module(), st.video_tokens.data(), st.video_tokens.size());

  // Tokens.
  flow.B = B;
  flow.L = L;
  flow.audio_tokens = Ta;
  flow.x.resize(std::size_t(B) * L * D);
  be_.embed_forward(st.audio_tokens.data(), st.video_tokens.data(), params_.value(pos_),
                    params_.value(modality_), flow.x.data(), B, Ta, L, D);
  note_activation(be_, flow, "embed", flow.x.data(), flow.x.size());
}

void AVInput::backward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<AVInputState&>(state_base);
  const int B = flow.B, D = D_, Ta = g_.audio_tokens, Nv = g_.video_tokens, L = g_.tokens;
  st.d_audio.resize(std::size_t(B) * Ta * D);
  st.d_video.resize(std::size_t(B) * Nv * D);
  be_.embed_backward(flow.dx.data(), st.d_audio.data(), st.d_video.data(), params_.grad(pos_),
                     params_.grad(modality_), B, Ta, L, D);
  be_.mask_rows(st.d_video.data(), st.video_mask.data(), B * Nv, D);
  patch_.backward(be_, st.patches.data(), st.d_video.data(), nullptr, B * Nv);

  st.d_bn.resize(std::size_t(B) * Ta * D);
  be_.gelu_backward(st.d_audio.data(), st.bn_out.data(), st.d_bn.data(), st.d_bn.size());
  // d_audio is reused for the BatchNorm input gradient.
  bn_.backward(be_, st.conv_out.data(), st.audio_mask.data(), st.d_bn.data(), st.bn_mean.data(),
               st.bn_rstd.data(), st.d_audio.data(), B * Ta);
  conv_.backward(be_, st.col.data(), st.d_audio.data(), nullptr, B, g_.frames);
}

}  // namespace avtrain
