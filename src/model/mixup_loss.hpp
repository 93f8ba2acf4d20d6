#pragma once
// Mixup's loss (Zhang et al. 2018): lambda CE(logits, labels) + (1 - lambda) CE(logits, mix_labels),
// the mean over rows, from two of the backend's cross-entropy calls (so every backend has it): the
// gradient of grad_scale * loss into dlogits (null: none), scratch[rows, classes] holding the second
// term's (with dlogits).
// *correct counts rows whose arg-max is `labels` (the label of weight lambda >= 1/2).
#include <cstdint>

#include "backend/backend.hpp"

namespace avtrain {

double mixup_cross_entropy(Backend& be, const float* logits, const std::int32_t* labels, const std::int32_t* mix_labels,
                           float lambda, float* dlogits, float* scratch, int rows, int classes, float grad_scale,
                           int* correct);

}  // namespace avtrain
