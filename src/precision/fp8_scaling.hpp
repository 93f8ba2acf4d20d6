#pragma once
// Delayed scaling of one FP8 tensor (Transformer Engine's DelayedScaling recipe): the tensor is
// quantized as fp8(x * scale) with a scale computed from the amaxes (largest |x|) of earlier steps,
// so the cast needs no pass over the tensor first. Per step:
//   record(amax)   for each use of the tensor in the step (micro-batches): the step's amax is the largest;
//   [the caller may reduce step_amax() over the data-parallel replicas (MAX) and set_step_amax() it]
//   update()       at the step's end: the step's amax joins the history (the oldest leaves), and
//                  scale = (FP8 max / amax) / 2^margin, amax the largest in the history (max) or the
//                  step's own (most_recent).
// As Transformer Engine's amax_and_scale_update: the first scale is 1; an amax that is zero, inf or
// NaN keeps the scale it had; a scale that would be inf (amax below FP8 max / FLT_MAX) is FLT_MAX; a
// step whose amax is 0 (the tensor unused, or all zeros) leaves the history as it was. Unlike its
// fmaxf, a NaN in the history is not passed over: like inf it keeps the scale until it leaves.
// Before the history holds an amax (a fresh start's first step, not a resumed one: the checkpoint
// brings its history), the first scale of 1 would let small tensors (gradients) underflow: the user
// (Fp8LinearScaling) then takes each use's scale just in time, scale_for() of the tensor's own amax.
#include <cstddef>
#include <vector>

#include "core/fp8.hpp"
#include "precision/precision_config.hpp"

namespace avtrain {

// The recipe's settings, precision.fp8_* of a deck.
struct Fp8Recipe {
  int history = 1024;
  Fp8Amax amax = Fp8Amax::max;
  int margin = 0;
  static Fp8Recipe of(const PrecisionConfig& c) { return {c.fp8_history, c.fp8_amax, c.fp8_margin}; }
};

class Fp8DelayedScaling {
 public:
  // Throws Error naming precision.fp8_history / precision.fp8_margin for values outside their ranges
  // (history >= 1, margin in [0, kFp8MarginMax]).
  Fp8DelayedScaling(Fp8Format format, const Fp8Recipe& recipe);

  Fp8Format format() const { return format_; }
  // The scale fp8(x * scale) takes and its inverse, 1 / scale in fp32, that the product's result is
  // multiplied by.
  float scale() const { return scale_; }
  float scale_inv() const { return 1.0f / scale_; }
  // The scale `amax` gives: (FP8 max / amax) / 2^margin, FLT_MAX where that is inf; scale() where
  // amax is zero, inf or NaN (no scale can be taken from it).
  float scale_for(float amax) const;
  // Whether a step has put an amax into the history yet (zeros only: none has).
  bool has_history() const;

  // The amax of one use of the tensor this step; the step's amax is the largest (NaN if any is NaN).
  void record(float amax);
  float step_amax() const { return step_amax_; }
  void set_step_amax(float amax) { step_amax_ = amax; }
  // Ends the step: the history takes the step's amax and the scale is computed again.
  void update();

  // The amaxes of the last `history` steps that recorded one, oldest first (zeros before there are
  // that many).
  std::vector<float> history() const;

  // A checkpoint's flat fp32 form: the scale, the step's amax so far, then history(); restore(state())
  // continues bit for bit.
  std::size_t state_size() const { return ring_.size() + 2; }
  std::vector<float> state() const;
  // Throws Error when `state` is not of state_size(): a checkpoint of another precision.fp8_history.
  void restore(const std::vector<float>& state);

 private:
  float window_amax() const;

  Fp8Format format_;
  Fp8Amax algorithm_;
  float scaled_max_;         // FP8 max / 2^margin, exact in fp32
  float scale_ = 1.0f;
  float step_amax_ = 0.0f;
  std::vector<float> ring_;  // the last `history` amaxes; ring_[next_] is the oldest
  std::size_t next_ = 0;
};

}  // namespace avtrain
