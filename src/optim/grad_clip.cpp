#include "optim/grad_clip.hpp"

namespace avtrain {

float clip_factor(double norm, float max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return float(max_norm / (norm + 1e-6));
}

float unscale_and_clip(Backend& be, ParamStore& params, double norm, double loss_scale, float max_norm) {
  const float clip = clip_factor(norm, max_norm);
  const float factor = float(double(clip) / loss_scale);
  if (factor == 1.0f) return clip;
  // One pass over the flat buffer: the gradients of buffers that are not trained are zero and stay so.
  be.scale(params.grads().data(), params.total_size(), factor);
  return clip;
}

}  // namespace avtrain
