#include "optim/grad_clip.hpp"

namespace avtrain {

float clip_factor(double norm, float max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return float(max_norm / (norm + 1e-6));
}

float grad_factor(double norm, double loss_scale, float max_norm) {
  return float(double(clip_factor(norm, max_norm)) / loss_scale);
}

}  // namespace avtrain
