// Elementwise ops and whole-tensor reductions.
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/vector_math.hpp"

namespace avtrain {

void CpuBackend::fill(float* x, std::size_t n, float value) {
  for (std::size_t i = 0; i < n; ++i) x[i] = value;
}

void CpuBackend::add(float* y, const float* x, std::size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::scale(float* x, std::size_t n, float a) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= a;
}

void CpuBackend::add_bias(float* y, const float* bias, int rows, int cols) {
#pragma omp parallel for schedule(static) if (std::size_t(rows) * cols > 65536)
  for (int r = 0; r < rows; ++r) {
    float* yr = y + std::size_t(r) * cols;
#pragma omp simd
    for (int c = 0; c < cols; ++c) yr[c] += bias[c];
  }
}

void CpuBackend::bias_grad(const float* dy, float* dbias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* d = dy + std::size_t(r) * cols;
#pragma omp simd
    for (int c = 0; c < cols; ++c) dbias[c] += d[c];
  }
}

// GELU(x) = x * Phi(x), Phi the standard normal CDF (the exact form, as PyTorch's default).
void CpuBackend::gelu_forward(const float* x, float* y, std::size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (std::size_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + vmath::erf(x[i] * float(M_SQRT1_2)));
}

// d/dx x*Phi(x) = Phi(x) + x * phi(x)
void CpuBackend::gelu_backward(const float* dy, const float* x, float* dx, std::size_t n) {
  constexpr float inv_sqrt_2pi = 0.3989422804014327f;
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (std::size_t i = 0; i < n; ++i) {
    float cdf = 0.5f * (1.0f + vmath::erf(x[i] * float(M_SQRT1_2)));
    float pdf = inv_sqrt_2pi * vmath::exp(-0.5f * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

double CpuBackend::sum_squares(const float* x, std::size_t n) {
  double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 65536)
  for (std::size_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return s;
}

float CpuBackend::abs_max(const float* x, std::size_t n) {
  float m = 0;
  bool nan = false;
#pragma omp simd reduction(max : m) reduction(|| : nan)
  for (std::size_t i = 0; i < n; ++i) {
    float a = std::fabs(x[i]);
    m = a > m ? a : m;
    nan = nan || a != a;
  }
  return nan ? NAN : m;
}

std::size_t CpuBackend::count_nonfinite(const float* x, std::size_t n) {
  std::size_t c = 0;
  for (std::size_t i = 0; i < n; ++i) c += !std::isfinite(x[i]);
  return c;
}

void CpuBackend::count_underflow(const float* x, std::size_t n, float threshold, std::size_t& below,
                                 std::size_t& nonzero) {
  below = 0;
  nonzero = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (x[i] != 0.0f) {
      ++nonzero;
      below += std::fabs(x[i]) < threshold;
    }
  }
}

}  // namespace avtrain
