#pragma once
// What the update does with a step's gradients, decided from their statistics: multiplied by one
// factor — divided by the loss scale and clipped to the global norm — in the optimizer's own pass
// (Backend::adamw_tensors), or left alone when the step is skipped (a non-finite gradient or loss:
// found_inf). The norm and the non-finite count come from the per-parameter statistics the trainer
// takes anyway (Backend::tensor_stats_many), so the check, the norm, the unscale and clip and the
// update take two passes over the gradients where check-and-unscale, norm, clip, update would take
// four.
//
// The gate is decided where the update runs (Backend::update_gate: on the device, from statistics
// left in its memory, so the update needs no return to the host) or on the host after the ranks
// agree; both read these functions (AVTRAIN_HOST_DEVICE: the CUDA kernel compiles this same code),
// so the device's gate has the host's bits. Products are written as fma (one rounding, on every
// compiler and device); divisions and square roots are IEEE's, the same everywhere.
#include <cmath>

#include "backend/backend.hpp"
#include "core/half.hpp"

namespace avtrain {

// The clip factor: max_norm / norm when norm > max_norm > 0, else 1. `norm` is the unscaled norm.
AVTRAIN_HOST_DEVICE inline float clip_factor(double norm, float max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return float(max_norm / (norm + 1e-6));
}

// What the update multiplies every gradient by: clip_factor(norm, max_norm) / loss_scale.
AVTRAIN_HOST_DEVICE inline float grad_factor(double norm, double loss_scale, float max_norm) {
  return float(double(clip_factor(norm, max_norm)) / loss_scale);
}

// The unscaled sum of squares of entries params[begin, end) of `stats` (gradients accumulated
// times the loss scale; unscale2 = 1 / loss_scale²), added in that order: a module's, in layers.csv.
AVTRAIN_HOST_DEVICE inline double unscaled_sum_squares(const Backend::TensorStats* stats, const int* params, int begin,
                                                       int end, double unscale2) {
  double sum = 0;
  for (int i = begin; i < end; ++i) sum = fma(stats[params[i]].sum_squares, unscale2, sum);
  return sum;
}

AVTRAIN_HOST_DEVICE inline double unscale_squared(double loss_scale) { return 1.0 / (loss_scale * loss_scale); }

// The gate of one rank's update from its stage's statistics (rule: Backend::UpdateRule): the stage's
// sum of squares module by module (LayerStatistics's order, the trainer's norm), gate[0] its
// grad_factor, gate[1] 1 when the step is skipped, else 0.
AVTRAIN_HOST_DEVICE inline void decide_update(const Backend::TensorStats* stats, const Backend::UpdateRule& rule,
                                              float* gate) {
  const double unscale2 = unscale_squared(rule.loss_scale);
  double total = 0;
  unsigned long long nonfinite = 0;
  for (int m = 0; m < rule.modules; ++m) {
    total += unscaled_sum_squares(stats, rule.params, rule.module_first[m], rule.module_first[m + 1], unscale2);
    for (int i = rule.module_first[m]; i < rule.module_first[m + 1]; ++i) nonfinite += stats[rule.params[i]].nonfinite;
  }
  const bool finite = total <= 1.7976931348623157e308;  // false for inf and NaN
  gate[0] = grad_factor(sqrt(total), rule.loss_scale, rule.max_norm);
  gate[1] = rule.loss_nonfinite || nonfinite > 0 || !finite ? 1.0f : 0.0f;
}

}  // namespace avtrain
