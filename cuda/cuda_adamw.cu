// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments; the CPU's formula
// and order of operations.
#include <cmath>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {
__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, std::size_t n, float lr, float beta1,
                             float beta2, float one_minus_beta1, float one_minus_beta2, float bc1, float bc2, float eps,
                             float weight_decay) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + one_minus_beta1 * gi;
    const float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / bc1, vhat = vi / bc2;
    const float wi = w[i];
    w[i] = wi - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * wi);
  }
}
}  // namespace

void CudaBackend::adamw(float* w, const float* g, float* m, float* v, std::size_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int step) {
  if (n == 0) return;
  // On the host as the CPU computes them, so the corrections are the same floats.
  const float bc1 = 1.0f - std::pow(beta1, float(step));
  const float bc2 = 1.0f - std::pow(beta2, float(step));
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(w, g, m, v, n, lr, beta1, beta2, 1.0f - beta1, 1.0f - beta2,
                                                         bc1, bc2, eps, weight_decay);
  CUDA_CHECK_LAUNCH();
}

}  // namespace avtrain::cuda
