#pragma once
// The first layer of AVNet: samples in, tokens out.
//   audio -> log-mel (fp32) -> audio.conv (Conv1d k=3 s=2) -> audio.bn (masked BatchNorm1d) -> GELU
//   (SpecAugment's masks, when a training micro-batch has them, between log-mel and conv: model/spec_masking.hpp)
//   video -> tubelets t x p x p x C -> video.patch (linear)
//   [audio tokens | video tokens] + embed.pos[L] + embed.modality[0|1], with the key-padding mask.
// The log-mel front end always runs in fp32; GELU's output takes the type of audio.bn.
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "model/batch_norm.hpp"
#include "model/conv1d.hpp"
#include "model/layer.hpp"
#include "model/linear.hpp"
#include "model/log_mel_frontend.hpp"
#include "model/model_config.hpp"
#include "model/spec_masking.hpp"
#include "precision/precision_policy.hpp"

namespace avtrain {

class AVInput final : public Layer {
 public:
  AVInput(Backend& be, ParamStore& params, Workspace& ws, const PrecisionPolicy& policy, const ModelConfig& m,
          const data::SetInfo& s);
  std::unique_ptr<LayerState> make_state() const override;
  void linears(std::vector<Linear*>& out) override { out.insert(out.end(), {&patch_}); }
  double forward_flops(int B, int L) const override;
  void forward(Flow& flow, LayerState& state) override;
  void backward(Flow& flow, LayerState& state) override;
  void end_step(Backend& be, const std::function<void(float*, std::size_t)>& combine, int micro_batches) override {
    bn_.fold_running_stats(be, combine, micro_batches);
  }
  const TokenGeometry& geometry() const { return g_; }
  // Starts the copy of mb's samples (audio, video) to tensor memory, so that on CUDA it runs beside
  // the ops issued before forward(mb): the stage runner calls it as soon as it holds the batch.
  // forward() copies a batch not staged this way itself.
  void stage(const data::MicroBatch& mb);

 private:
  // parallel.cp: this part's tokens of the whole sequence in the workspace, into flow.x, with the
  // masks and counts the blocks and the head read.
  void cut(Flow& flow, LayerState& state, const data::MicroBatch& mb);
  Backend& be_;
  Workspace& ws_;
  ParamStore& params_;
  TokenGeometry g_;
  data::SetInfo set_;
  int D_;
  LogMelFrontend frontend_;
  Conv1d conv_;
  BatchNorm1d bn_;
  Linear patch_;
  ParamId pos_, modality_;
  DType embed_dtype_;  // of the token sum
  std::vector<std::uint8_t> host_frame_mask_, host_audio_mask_, host_video_mask_, host_key_mask_;
  Buffer audio_in_;                          // the micro-batch's samples in tensor memory
  SpecMasking spec_masking_;                 // SpecAugment's masks, when the micro-batch has them
  AlignedArray<std::uint8_t> video_in_;
  std::unique_ptr<Backend::InputUpload> audio_upload_, video_upload_;
  std::vector<std::int64_t> staged_;  // the samples of the batch stage() copies (global indices)
  bool staged_valid_ = false;
};

}  // namespace avtrain
