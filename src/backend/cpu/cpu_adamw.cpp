// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments.
#include <cmath>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/stochastic_round.hpp"

#include "backend/cpu/cpu_backend.hpp"

namespace avtrain {

void CpuBackend::adamw(Target w, const float* g, float* m, float* v, std::size_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int step, WeightRounding rounding) {
  const float bc1 = 1.0f - std::pow(beta1, float(step));
  const float bc2 = 1.0f - std::pow(beta2, float(step));
  if (w.dtype == DType::f32) {
    float* wf = static_cast<float*>(w.data);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
      v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
      float mhat = m[i] / bc1, vhat = v[i] / bc2;
      wf[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * wf[i]);
    }
    return;
  }
  require(w.dtype == DType::bf16, std::string("internal: adamw of ") + dtype_name(w.dtype) + " weights");
  std::uint16_t* wb = static_cast<std::uint16_t*>(w.data);
  const std::uint64_t stream = rounding_stream(rounding.key, std::uint64_t(step));
  const Rounding mode = rounding.rounding;
  const std::size_t first = rounding.first;
  // The fp32 loop's expression on the widened weights (the same fp32 update), then the rounding.
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    float mhat = m[i] / bc1, vhat = v[i] / bc2;
    const float wi = bf16_to_float(wb[i]);
    wb[i] = round_to_bf16(wi - lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * wi), mode, stream, first + i);
  }
}

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace avtrain
