#include "optim/grad_norm.hpp"

namespace avtrain {

double grad_sum_squares(Backend& be, ParamStore& params) {
  double s = 0;
  for (ParamId id = 0; id < ParamId(params.params().size()); ++id) {
    const ParamInfo& p = params.info(id);
    if (p.trainable) s += be.sum_squares(params.grad(id), p.size);
  }
  return s;
}

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
