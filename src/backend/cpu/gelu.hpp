#pragma once
// GELU and its derivative at one element, shared by the separate passes (cpu_elementwise.cpp) and
// the fused ones (cpu_fused.cpp), so that both compile the same expression to the same bits.
#include <cmath>
#include <cstddef>

#include "backend/cpu/vector_math.hpp"

namespace avtrain::cpu {

// GELU(x) = x * Phi(x), Phi the standard normal CDF (the exact form, as PyTorch's default).
inline float gelu(float x) { return 0.5f * x * (1.0f + vmath::erf(x * float(M_SQRT1_2))); }

// dy * d/dx x*Phi(x) = dy * (Phi(x) + x * phi(x))
inline float gelu_grad(float dy, float x) {
  constexpr float inv_sqrt_2pi = 0.3989422804014327f;
  const float cdf = 0.5f * (1.0f + vmath::erf(x * float(M_SQRT1_2)));
  const float pdf = inv_sqrt_2pi * vmath::exp(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}

// The loops over n elements on the calling thread (cpu_elementwise.cpp): out of line, so that the
// separate passes and the fused ones run one compiled loop, whose NaNs keep their sign too.
void gelu_span(const float* x, float* y, std::size_t n);
void gelu_grad_span(const float* dy, const float* x, float* dx, std::size_t n);

}  // namespace avtrain::cpu
