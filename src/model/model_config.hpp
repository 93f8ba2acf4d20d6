#pragma once
// The architecture a deck sets, and the token geometry it implies for a shard set's shapes.
#include <cstdint>
#include <string>

#include "core/enum_names.hpp"
#include "data/shard_set.hpp"

namespace avtrain {

// What the classifier learns: one class a clip (softmax cross-entropy) or a set of classes a clip
// (sigmoid binary cross-entropy per class, PyTorch's BCEWithLogitsLoss; format v2 shards, or v1
// shards read as one label each).
enum class Task { single_label, multi_label };
constexpr EnumNames<Task, 2> enum_names(Task) {
  return {{{Task::single_label, "single_label"}, {Task::multi_label, "multi_label"}}};
}

struct ModelConfig {
  int width = 128;        // D
  int depth = 4;          // transformer blocks
  int heads = 4;
  int mlp_ratio = 4;
  int audio_window = 256; // samples per frame (n_fft)
  int audio_hop = 128;
  int mel_bins = 64;
  int tubelet_frames = 2; // t of a t x p x p x C tubelet
  int patch = 8;          // p
  double nce_temperature = 0.1;
  double nce_weight = 0.1;  // lambda; 0 turns InfoNCE off
  double ce_weight = 1.0;   // weight of the classification term
  Task task = Task::single_label;
  double init_std = 0.02;
  // Not the architecture: where a fresh run's weights come from (docs/safetensors.md).
  std::string init_from;  // a safetensors file whose tensors a fresh start loads by name; "": drawn afresh
  std::string init_skip;  // comma-separated globs over parameter names that init_from leaves fresh
};

// Throws Error naming `dir` when its set cannot train model.task: single_label on a multi-label set
// (format v2).
void require_task_fits(const ModelConfig& m, const data::SetInfo& s, const std::string& dir);

// Shapes that follow from a ModelConfig and a shard set.
struct TokenGeometry {
  int frames = 0;        // audio frames Tf = 1 + (A - window) / hop
  int audio_tokens = 0;  // Ta = ceil(Tf / 2) after Conv1d(k=3, s=2, pad=1)
  int video_tokens = 0;  // Nv = (F/t) (H/p) (W/p)
  int patch_dim = 0;     // t p p C
  int tokens = 0;        // L = Ta + Nv
  int bins = 0;          // DFT bins window/2 + 1
  int window = 0, hop = 0, tubelet_frames = 0, patch = 0, tokens_per_tubelet_step = 0;

  static TokenGeometry of(const ModelConfig& m, const data::SetInfo& s);  // throws Error on misfit
  int valid_frames(int audio_len) const;
  int valid_audio_tokens(int audio_len) const;
  int valid_video_tokens(int video_len) const;
};

}  // namespace avtrain
