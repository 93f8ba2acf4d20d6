#pragma once
// The last touch on the gradients before the update: divided by the loss scale and clipped to the
// global norm, by one factor that the optimizer's own pass applies (AdamW::step). The norm and the
// non-finite check come from the per-parameter statistics the trainer gathers anyway, in one pass
// (Backend::tensor_stats_many): so the check, the norm, the unscale and clip and the update take
// two passes over the gradients where check-and-unscale, norm, clip, update would take four.

namespace avtrain {

// The clip factor: max_norm / norm when norm > max_norm > 0, else 1. `norm` is the unscaled norm.
float clip_factor(double norm, float max_norm);

// What the update multiplies every gradient by: clip_factor(norm, max_norm) / loss_scale.
float grad_factor(double norm, double loss_scale, float max_norm);

}  // namespace avtrain
