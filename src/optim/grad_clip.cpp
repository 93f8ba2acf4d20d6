#include "optim/grad_clip.hpp"

namespace avtrain {

float clip_gradients(Backend& be, ParamStore& params, double norm, float max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  const float factor = float(max_norm / (norm + 1e-6));
  for (ParamId id = 0; id < ParamId(params.params().size()); ++id) {
    const ParamInfo& p = params.info(id);
    if (p.trainable) be.scale(params.grad(id), p.size, factor);
  }
  return factor;
}

}  // namespace avtrain
