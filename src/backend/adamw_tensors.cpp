// Backend::adamw_tensors as the separate ops: per tensor, scale, adamw, then pack or copy.
#include "backend/backend.hpp"

namespace avtrain {

void Backend::adamw_tensors(float* w, float* g, float* m, float* v, const AdamWTensor* tensors, int count, float lr,
                            float beta1, float beta2, float eps, float grad_factor, int step) {
  for (int i = 0; i < count; ++i) {
    const AdamWTensor& t = tensors[i];
    if (t.size == 0) continue;
    float* wt = w + t.offset;
    if (grad_factor != 1.0f) scale(g + t.offset, t.size, grad_factor);
    adamw(wt, g + t.offset, m + t.offset, v + t.offset, t.size, lr, beta1, beta2, eps, t.weight_decay, step);
    if (!t.copy) continue;
    if (t.copy_type == DType::f32) copy(t.copy, wt, t.size * sizeof(float));
    else pack(t.copy_type, wt, static_cast<std::uint16_t*>(t.copy), t.size);
  }
}

}  // namespace avtrain
