#pragma once
// The global gradient norm over trainable parameters, and clipping to a maximum norm.
#include "backend/backend.hpp"
#include "model/param_store.hpp"

namespace avtrain {

// Sum of squared gradients of the trainable parameters (a later cut into stages sums these).
double grad_sum_squares(Backend& be, ParamStore& params);
// Scales every gradient by max_norm / norm when norm > max_norm > 0; returns the factor used.
float clip_gradients(Backend& be, ParamStore& params, double norm, float max_norm);

}  // namespace avtrain
