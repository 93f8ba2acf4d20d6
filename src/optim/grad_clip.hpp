#pragma once
// Global-norm gradient clipping; the norm itself comes from the per-layer statistics the trainer
// gathers anyway (a later cut into stages sums their squares across stages).
#include "backend/backend.hpp"
#include "model/param_store.hpp"

namespace avtrain {

// Scales every gradient by max_norm / norm when norm > max_norm > 0; returns the factor used.
float clip_gradients(Backend& be, ParamStore& params, double norm, float max_norm);

}  // namespace avtrain
