#include "model/av_input.hpp"

#include "core/error.hpp"
#include "model/saved_tensor.hpp"
#include "model/token_parts.hpp"

namespace avtrain {

namespace {
struct AVInputState final : LayerState {
  Mask frame_mask, audio_mask, video_mask;  // in tensor memory
  SavedTensor col, conv_out, bn_out, patches;
  Buffer bn_mean, bn_rstd;
  Labels rows;  // parallel.cp: the row of the whole sequence each of this part's tokens is
  std::size_t bytes() const override {
    return total_bytes(col, conv_out, bn_out, patches, bn_mean, bn_rstd) + frame_mask.size() + audio_mask.size() +
           video_mask.size() + rows.size() * sizeof(std::int32_t);
  }
};

// Workspace slots.
// kTokens: under parallel.cp, the whole sequence's tokens (and their gradient) before the cut.
enum Slot { kLogmel, kCol, kConv, kBn, kAudio, kPatches, kVideo, kTokens };
}  // namespace

AVInput::AVInput(Backend& be, ParamStore& params, Workspace& ws, const PrecisionPolicy& policy, const ModelConfig& m,
                 const data::SetInfo& s)
    : Layer("input"), be_(be), ws_(ws), params_(params), g_(TokenGeometry::of(m, s)), set_(s), D_(m.width),
      frontend_(g_, m.mel_bins, s.sample_rate),
      conv_(params, "audio.conv", m.mel_bins, m.width, 3, 2, 1, m.init_std, policy.of("audio.conv")),
      bn_(params, "audio.bn", m.width, policy.of("audio.bn")),
      patch_(params, "video.patch", g_.patch_dim, m.width, m.init_std, policy.of("video.patch")) {
  pos_ = params.add("embed", "pos", {g_.tokens, m.width}, Init::normal, m.init_std, true);
  modality_ = params.add("embed", "modality", {2, m.width}, Init::normal, m.init_std, true);
  embed_dtype_ = policy.of("embed");
  audio_upload_ = be.make_input_upload();
  video_upload_ = be.make_input_upload();
}

void AVInput::stage(const data::MicroBatch& mb) {
  audio_in_.resize(mb.audio.size());
  video_in_.resize(mb.video.size());
  audio_upload_->start(audio_in_.data(), mb.audio.data(), mb.audio.size() * sizeof(float));
  video_upload_->start(video_in_.data(), mb.video.data(), mb.video.size());
  staged_ = mb.index;
  staged_valid_ = true;
}

std::unique_ptr<LayerState> AVInput::make_state() const { return std::make_unique<AVInputState>(); }

double AVInput::forward_flops(int B, int) const {
  const double frames = double(B) * g_.frames, mel = frontend_.mel_bins();
  const double dft = 2.0 * frames * g_.window * 2.0 * g_.bins, filterbank = 2.0 * frames * g_.bins * mel;
  const double conv = 2.0 * B * g_.audio_tokens * 3.0 * mel * D_;
  const double patch = 2.0 * B * g_.video_tokens * double(g_.patch_dim) * D_;
  return dft + filterbank + conv + patch;
}

void AVInput::forward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<AVInputState&>(state_base);
  const data::MicroBatch& mb = *flow.batch;
  const int B = mb.size, D = D_, Tf = g_.frames, Ta = g_.audio_tokens, Nv = g_.video_tokens, L = g_.tokens;
  require(mb.audio.size() == std::size_t(B) * set_.audio_samples, "internal: micro-batch audio size");

  // The masks follow from the sample lengths, on the host; then they and the samples are uploaded
  // to wherever the tensors live.
  host_frame_mask_.assign(std::size_t(B) * Tf, 0);
  host_audio_mask_.assign(std::size_t(B) * Ta, 0);
  host_video_mask_.assign(std::size_t(B) * Nv, 0);
  host_key_mask_.assign(std::size_t(B) * L, 0);
  for (int b = 0; b < B; ++b) {
    const int nf = g_.valid_frames(mb.audio_len[b]), na = g_.valid_audio_tokens(mb.audio_len[b]);
    const int nv = g_.valid_video_tokens(mb.video_len[b]);
    for (int t = 0; t < nf; ++t) host_frame_mask_[std::size_t(b) * Tf + t] = 1;
    for (int t = 0; t < na; ++t) host_audio_mask_[std::size_t(b) * Ta + t] = host_key_mask_[std::size_t(b) * L + t] = 1;
    for (int t = 0; t < nv; ++t) host_video_mask_[std::size_t(b) * Nv + t] = host_key_mask_[std::size_t(b) * L + Ta + t] = 1;
  }
  st.frame_mask.upload(host_frame_mask_.data(), host_frame_mask_.size());
  st.audio_mask.upload(host_audio_mask_.data(), host_audio_mask_.size());
  st.video_mask.upload(host_video_mask_.data(), host_video_mask_.size());
  flow.token_mask.upload(host_key_mask_.data(), host_key_mask_.size());
  if (!staged_valid_ || staged_ != mb.index) stage(mb);
  staged_valid_ = false;
  audio_upload_->ready();
  video_upload_->ready();

  // Audio branch.
  const std::size_t na = std::size_t(B) * Ta * D;
  Buffer& logmel = ws_[kLogmel];
  logmel.resize(std::size_t(B) * Tf * frontend_.mel_bins());
  frontend_.forward(be_, audio_in_.data(), set_.audio_samples, st.frame_mask.data(), logmel.data(), B);
  if (!mb.spec_keep.empty()) {  // SpecAugment: the masks drawn on the host (data/augment.hpp)
    require(mb.spec_keep.size() == logmel.size(), "internal: micro-batch SpecAugment mask size");
    spec_masking_.apply(be_, logmel.data(), mb.spec_keep, st.frame_mask.data(), B, Tf, frontend_.mel_bins());
  }
  Buffer& conv_out = ws_[kConv];
  conv_out.resize(na);
  conv_.forward(be_, logmel.data(), ws_[kCol], conv_out.data(), B, Tf);
  note_activation(be_, flow, conv_.module(), conv_out.data(), na);
  st.col.keep(be_, ws_[kCol], conv_.dtype());
  const float* conv_values = st.conv_out.keep(be_, conv_out, conv_.dtype());
  Buffer& bn_out = ws_[kBn];
  bn_out.resize(na);
  st.bn_mean.resize(D);
  st.bn_rstd.resize(D);
  bn_.forward(be_, conv_values, st.audio_mask.data(), bn_out.data(), st.bn_mean.data(), st.bn_rstd.data(), B * Ta,
              flow.mode == Mode::train);
  const float* bn_values = st.bn_out.keep(be_, bn_out, bn_.dtype());
  Buffer& audio = ws_[kAudio];
  audio.resize(na);
  be_.gelu_forward(bn_values, audio.data(), na);
  be_.round_to(rounded(audio.data(), bn_.dtype()), na);
  note_activation(be_, flow, bn_.module(), audio.data(), na);

  // Video branch.
  const std::size_t nv = std::size_t(B) * Nv * D;
  Buffer& patches = ws_[kPatches];
  patches.resize(std::size_t(B) * Nv * g_.patch_dim);
  be_.video_patches(video_in_.data(), patches.data(), B, set_.frames, set_.height, set_.width, set_.channels,
                    g_.tubelet_frames, g_.patch);
  // FP8: the patches kept as video.patch's E4M3 copy.
  Buffer16* patches16 = ws_.fp8_input_for(patch_.fp8(), patch_.dtype(), 0);
  st.patches.round_and_keep(be_, patches, patch_.dtype(), patches16);
  Buffer& video = ws_[kVideo];
  video.resize(nv);
  patch_.forward(be_, st.patches.operand(), video.data(), B * Nv, patches16 ? &st.patches : nullptr);
  be_.mask_rows(video.data(), st.video_mask.data(), B * Nv, D);
  note_activation(be_, flow, patch_.module(), video.data(), nv);

  // Tokens: the whole sequence, then under parallel.cp this part's (model/token_parts.hpp). Every
  // part computes this layer whole (its activations are a small share of a block's): BatchNorm's
  // statistics are then the whole sequence's, and the embeddings those of the tokens' global places.
  flow.B = B;
  flow.L = L;
  flow.audio_tokens = Ta;
  Buffer& tokens = flow.context ? ws_[kTokens] : flow.x;
  tokens.resize(std::size_t(B) * L * D);
  be_.embed_forward(audio.data(), video.data(), params_.value(pos_), params_.value(modality_), tokens.data(), B, Ta,
                    L, D);
  be_.round_to(rounded(tokens.data(), embed_dtype_), tokens.size());
  flow.x_dtype = embed_dtype_;
  note_activation(be_, flow, "embed", tokens.data(), tokens.size());
  if (flow.context) cut(flow, st, mb);
}

void AVInput::cut(Flow& flow, LayerState& state_base, const data::MicroBatch& mb) {
  auto& st = static_cast<AVInputState&>(state_base);
  const int B = mb.size, D = D_;
  const TokenParts parts = TokenParts::of(g_, flow.context->parts(), flow.context->part());
  std::vector<int> valid_audio(std::size_t(B), 0), valid_video(std::size_t(B), 0);
  for (int b = 0; b < B; ++b) {
    valid_audio[std::size_t(b)] = g_.valid_audio_tokens(mb.audio_len[std::size_t(b)]);
    valid_video[std::size_t(b)] = g_.valid_video_tokens(mb.video_len[std::size_t(b)]);
    const int valid = valid_audio[std::size_t(b)] + valid_video[std::size_t(b)];
    require(valid >= parts.parts, "parallel.cp " + std::to_string(parts.parts) + ": sample " +
                                      std::to_string(mb.index[std::size_t(b)]) + " has " + std::to_string(valid) +
                                      " valid tokens, fewer than the parts it would be cut into");
  }
  const TokenParts::Cut c = parts.cut(valid_audio, valid_video);
  st.rows.upload(c.rows.data(), c.rows.size());
  flow.token_mask.upload(c.mask.data(), c.mask.size());
  flow.key_mask.upload(c.keys.data(), c.keys.size());
  flow.pool_counts.upload(c.counts.data(), c.counts.size());
  const int Lp = parts.tokens();
  flow.L = Lp;
  flow.audio_tokens = parts.audio_slots;
  flow.x.resize(std::size_t(B) * Lp * D);
  be_.gather_rows(ws_[kTokens].data(), st.rows.data(), flow.x.data(), B * Lp, D);
}

void AVInput::backward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<AVInputState&>(state_base);
  const int B = flow.B, D = D_, Ta = g_.audio_tokens, Nv = g_.video_tokens, L = g_.tokens;
  const std::size_t na = std::size_t(B) * Ta * D, nv = std::size_t(B) * Nv * D;
  // parallel.cp: this part's token gradients at their rows of the whole sequence, zero elsewhere
  // (every gradient below is linear in them: the parts' parameter gradients add up to the whole's).
  Buffer& dx = flow.context ? ws_[kTokens] : flow.dx;
  if (flow.context) {
    dx.resize(std::size_t(B) * L * D);
    be_.fill(dx.data(), dx.size(), 0.0f);
    be_.scatter_rows(flow.dx.data(), st.rows.data(), dx.data(), B * flow.L, D);
  }
  be_.round_to(rounded(dx.data(), embed_dtype_), dx.size());
  Buffer& d_audio = ws_[kAudio];
  Buffer& d_video = ws_[kVideo];
  d_audio.resize(na);
  d_video.resize(nv);
  be_.embed_backward(dx.data(), d_audio.data(), d_video.data(), params_.grad(pos_), params_.grad(modality_), B,
                     Ta, L, D);
  be_.mask_rows(d_video.data(), st.video_mask.data(), B * Nv, D);
  be_.round_to(rounded(d_video.data(), patch_.dtype()), nv);
  patch_.backward(be_, st.patches.operand(), d_video.data(), nullptr, B * Nv);

  be_.round_to(rounded(d_audio.data(), bn_.dtype()), na);
  Buffer& d_bn = ws_[kLogmel];
  d_bn.resize(na);
  be_.gelu_backward(d_audio.data(), st.bn_out.operand(), d_bn.data(), na);
  be_.round_to(rounded(d_bn.data(), bn_.dtype()), na);
  note_gradient(be_, flow, bn_.module() + " (GELU)", d_bn.data(), na);
  const float* conv_out = st.conv_out.load(be_, ws_[kConv]);
  Buffer& d_conv = d_audio;  // d_audio has been read
  bn_.backward(be_, conv_out, st.audio_mask.data(), d_bn.data(), st.bn_mean.data(), st.bn_rstd.data(),
               d_conv.data(), B * Ta);
  be_.round_to(rounded(d_conv.data(), conv_.dtype()), na);
  note_gradient(be_, flow, bn_.module(), d_conv.data(), na);
  conv_.backward(be_, st.col.operand(), d_conv.data(), nullptr, B, g_.frames);
}

}  // namespace avtrain
