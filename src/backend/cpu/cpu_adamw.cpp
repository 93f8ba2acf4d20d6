// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments.
#include <cmath>

#include "core/half.hpp"
#include "core/stochastic_round.hpp"

#include "backend/cpu/cpu_backend.hpp"

namespace avtrain {

void CpuBackend::adamw(float* w, const float* g, float* m, float* v, std::size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay, int step) {
  const float bc1 = 1.0f - std::pow(beta1, float(step));
  const float bc2 = 1.0f - std::pow(beta2, float(step));
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    float mhat = m[i] / bc1, vhat = v[i] / bc2;
    w[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * w[i]);
  }
}

void CpuBackend::adamw_bf16(std::uint16_t* w, const float* g, float* m, float* v, std::size_t n, float lr, float beta1,
                            float beta2, float eps, float weight_decay, int step, Rounding rounding,
                            std::uint64_t rounding_key, std::size_t first) {
  const float bc1 = 1.0f - std::pow(beta1, float(step));
  const float bc2 = 1.0f - std::pow(beta2, float(step));
  const std::uint64_t stream = rounding_stream(rounding_key, std::uint64_t(step));
  // adamw()'s loop and expression (the same fp32 update), then the rounding.
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    float mhat = m[i] / bc1, vhat = v[i] / bc2;
    const float wi = bf16_to_float(w[i]);
    w[i] = round_to_bf16(wi - lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * wi), rounding, stream, first + i);
  }
}

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace avtrain
