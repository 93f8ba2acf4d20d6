// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments; the CPU's formula
// and order of operations.
#include <algorithm>
#include <cmath>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"

namespace avtrain::cuda {

namespace {
constexpr int kThreads = 256;

unsigned blocks_for(std::size_t n) { return unsigned(std::min<std::size_t>((n + kThreads - 1) / kThreads, 1u << 16)); }

__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, std::size_t n, float lr, float beta1,
                             float beta2, float one_minus_beta1, float one_minus_beta2, float bc1, float bc2, float eps,
                             float weight_decay) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
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
