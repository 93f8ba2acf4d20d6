// Elementwise ops and whole-tensor reductions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>
#include <cstring>

#include "backend/cpu/chunks.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/gelu.hpp"
#include "backend/update_gate.hpp"

namespace avtrain {

void CpuBackend::fill(float* x, std::size_t n, float value) {
  for (std::size_t i = 0; i < n; ++i) x[i] = value;
}

void CpuBackend::add(float* y, const float* x, std::size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::scale(float* x, std::size_t n, float a) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= a;
}

void CpuBackend::fill_rows(float* y, const float* row, int rows, int cols) {
#pragma omp parallel for schedule(static) if (std::size_t(rows) * cols >= kParallelMinElements)
  for (int r = 0; r < rows; ++r) std::memcpy(y + std::size_t(r) * cols, row, sizeof(float) * cols);
}

// Each thread sums a band of columns over all rows; a stored copy is first widened (exactly) into
// scratch, so it gives the bits of its fp32 values.
void CpuBackend::bias_grad(Operand dy_in, float* dbias, int rows, int cols) {
  const float* dy = widened(dy_in, std::size_t(rows) * cols, operand_x_);
  constexpr int band = 64;
#pragma omp parallel for schedule(static) if (std::size_t(rows) * cols >= kParallelMinElements)
  for (int c0 = 0; c0 < cols; c0 += band) {
    const int c1 = std::min(cols, c0 + band);
    float sum[band] = {};
    for (int r = 0; r < rows; ++r) {
      const float* d = dy + std::size_t(r) * cols;
#pragma omp simd
      for (int c = c0; c < c1; ++c) sum[c - c0] += d[c];
    }
    for (int c = c0; c < c1; ++c) dbias[c] += sum[c - c0];
  }
}

void cpu::gelu_span(const float* x, float* y, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
}

void cpu::gelu_grad_span(const float* dy, const float* x, float* dx, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) dx[i] = gelu_grad(dy[i], x[i]);
}

// GELU(x) = x * Phi(x) (gelu.hpp), in chunks on the threads (chunks.hpp).
void CpuBackend::gelu_forward(const float* x, float* y, std::size_t n) {
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) { cpu::gelu_span(x + lo, y + lo, m); });
}

void CpuBackend::gelu_backward(const float* dy, Operand x_in, float* dx, std::size_t n) {
  const float* x = widened(x_in, n, operand_x_);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) { cpu::gelu_grad_span(dy + lo, x + lo, dx + lo, m); });
}

namespace {
// Sums of squares are taken in fixed blocks and the block sums added in order, so the result does
// not depend on how many threads ran.
constexpr std::size_t kSumBlock = 4096;

double block_sum_squares(const float* x, std::size_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (std::size_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return s;
}

double ordered_sum_squares(const float* x, std::size_t n) {
  const std::size_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(blocks);
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::size_t b = 0; b < blocks; ++b)
    partial[b] = block_sum_squares(x + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
  double s = 0;
  for (double p : partial) s += p;
  return s;
}
}  // namespace

double CpuBackend::sum_squares(const float* x, std::size_t n) { return ordered_sum_squares(x, n); }

// On the bit patterns of |x|: integer order is float order for non-negative floats, and every NaN
// pattern lies above +inf, so one integer max finds the largest magnitude and any NaN at once. A
// stored copy is first widened (exactly) into scratch: the bits of its fp32 values.
float CpuBackend::abs_max(Operand x_in, std::size_t n) {
  const float* x = widened(x_in, n, operand_x_);
  std::uint32_t m = 0;
#pragma omp parallel for simd reduction(max : m) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    bits &= 0x7fffffffu;
    m = bits > m ? bits : m;
  }
  if (m > 0x7f800000u) return NAN;
  float result;
  std::memcpy(&result, &m, sizeof result);
  return result;
}

// One pass over the blocks of sum_squares: each block's sum of squares (the same blocks, summed in
// order after: its bits) and its counts (integers: any order gives the same), so one parallel region.
Backend::TensorStats CpuBackend::tensor_stats(const float* x, std::size_t n, float threshold) {
  const std::size_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(blocks);
  std::size_t nonfinite = 0, nonzero = 0, below = 0;
#pragma omp parallel for schedule(static) reduction(+ : nonfinite, nonzero, below) if (n >= kParallelMinElements)
  for (std::size_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * kSumBlock;
    const std::size_t m = std::min(kSumBlock, n - b * kSumBlock);
    partial[b] = block_sum_squares(xb, m);
    std::size_t block_nonfinite = 0, block_nonzero = 0, block_below = 0;
#pragma omp simd reduction(+ : block_nonfinite, block_nonzero, block_below)
    for (std::size_t i = 0; i < m; ++i) {
      const float a = std::fabs(xb[i]);
      block_nonfinite += !(a <= 3.402823466e38f);
      block_nonzero += a != 0.0f;
      block_below += a != 0.0f && a < threshold;
    }
    nonfinite += block_nonfinite, nonzero += block_nonzero, below += block_below;
  }
  double sum = 0;
  for (double p : partial) sum += p;
  return {sum, nonfinite, nonzero, below};
}

void CpuBackend::tensor_stats_many(const float* x, const Span* spans, int count, float threshold, TensorStats* out) {
  for (int i = 0; i < count; ++i) out[i] = tensor_stats(x + spans[i].offset, spans[i].size, threshold);
}

// Host memory is the backend's: the statistics are where tensor_stats_many puts them.
void CpuBackend::tensor_stats_many_into(const float* x, const Span* spans, int count, float threshold,
                                        TensorStats* result) {
  tensor_stats_many(x, spans, count, threshold, result);
}

void CpuBackend::update_gate(const TensorStats* stats, const UpdateRule& rule, float* gate) {
  decide_update(stats, rule, gate);
}

void CpuBackend::abs_max_into(Operand x, std::size_t n, float* result) {
  const float m = abs_max(x, n);
  *result = std::isnan(m) || std::isnan(*result) ? NAN : std::max(*result, m);
}

void CpuBackend::sum_squares_into(const float* x, std::size_t n, double* result) { *result += sum_squares(x, n); }

}  // namespace avtrain
