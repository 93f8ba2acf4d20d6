#pragma once
// Linear warm-up to the peak over warmup_steps, then a cosine from the peak down to min_lr, which
// the last step (total_steps - 1) uses.
#include <algorithm>
#include <cmath>

#include "optim/optim_config.hpp"

namespace avtrain {

// lr for the update that completes step `step` (0-based) of `total_steps`.
inline float learning_rate(const OptimConfig& c, int step, int total_steps) {
  if (c.warmup_steps > 0 && step < c.warmup_steps) return c.lr * float(step + 1) / float(c.warmup_steps);
  const int decay_steps = std::max(1, total_steps - 1 - c.warmup_steps);
  const double progress = std::clamp(double(step - c.warmup_steps) / decay_steps, 0.0, 1.0);
  return float(c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace avtrain
