#pragma once
// The last touch on the gradients before the update: divide by the loss scale and clip to the
// global norm, in one pass over the flat gradient buffer. The norm and the non-finite check come
// from the per-parameter statistics the trainer gathers anyway, in one pass (Backend::
// tensor_stats_many): so the check, the norm and the unscale take two passes over the gradients
// where check-and-unscale, norm, clip would take three.
#include "backend/backend.hpp"
#include "model/param_store.hpp"

namespace avtrain {

// The clip factor: max_norm / norm when norm > max_norm > 0, else 1. `norm` is the unscaled norm.
float clip_factor(double norm, float max_norm);

// Multiplies every gradient by clip_factor(norm, max_norm) / loss_scale (no pass when that is 1);
// returns the clip factor.
float unscale_and_clip(Backend& be, ParamStore& params, double norm, double loss_scale, float max_norm);

}  // namespace avtrain
