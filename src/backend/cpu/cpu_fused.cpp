// The CPU's fused passes: the composed defaults' operations in the same order on each element, so
// the same bits, but in fewer passes over memory. A linear layer's bias fill, rounding and GELU run
// on each band of its product's rows, on that band's thread, just before and after the band's
// product (cpu_gemm.cpp) while the band is in the core's cache; the residual add and GELU's backward
// round each chunk (chunks.hpp) as soon as they have written it. Where a product is banded by columns
// (out > rows) the defaults run.
#include <cstring>

#include "backend/cpu/chunks.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/gelu.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace avtrain {

namespace {

// x[0, n) rounded to `type` in place, its patterns to x16 when not null (fp32: nothing): round_to's
// per-chunk work.
void round_span(DType type, float* x, std::uint16_t* x16, std::size_t n) {
  if (type == DType::bf16) round_to_bf16(x, x16, n);
  else if (type == DType::f16) round_to_half(x, x16, n);
}

}  // namespace

void CpuBackend::linear_forward(DType type, Operand x, Operand w, const float* bias, float* y, std::uint16_t* y16,
                                int rows, int in, int out) {
  if (!bands_rows(rows, out)) return Backend::linear_forward(type, x, w, bias, y, y16, rows, in, out);
  const RowBandStep fill = [&](int lo, int hi) {
    for (int r = lo; r < hi; ++r) std::memcpy(y + std::size_t(r) * out, bias, sizeof(float) * out);
  };
  const RowBandStep round = [&](int lo, int hi) {
    const std::size_t at = std::size_t(lo) * out;
    round_span(type, y + at, y16 ? y16 + at : nullptr, std::size_t(hi - lo) * out);
  };
  gemm_in_bands(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, bias ? 1.0f : 0.0f, y, out,
                bias ? fill : RowBandStep(), type == DType::f32 ? RowBandStep() : round);
}

void CpuBackend::linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, float* f,
                                     std::uint16_t* f16, float* g, std::uint16_t* g16, int rows, int in, int out) {
  if (!bands_rows(rows, out))
    return Backend::linear_gelu_forward(type, x, w, bias, f, f16, g, g16, rows, in, out);
  const RowBandStep fill = [&](int lo, int hi) {
    for (int r = lo; r < hi; ++r) std::memcpy(f + std::size_t(r) * out, bias, sizeof(float) * out);
  };
  const RowBandStep round_gelu_round = [&](int lo, int hi) {
    const std::size_t at = std::size_t(lo) * out, n = std::size_t(hi - lo) * out;
    float* fb = f + at;
    float* gb = g + at;
    round_span(type, fb, f16 ? f16 + at : nullptr, n);
    cpu::gelu_span(fb, gb, n);
    round_span(type, gb, g16 ? g16 + at : nullptr, n);
  };
  gemm_in_bands(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, bias ? 1.0f : 0.0f, f, out,
                bias ? fill : RowBandStep(), round_gelu_round);
}

void CpuBackend::add_round(DType type, float* y, const float* x, std::uint16_t* y16, std::size_t n) {
  if (type == DType::f32) return add(y, x, n);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    float* yc = y + lo;
    const float* xc = x + lo;
#pragma omp simd
    for (std::size_t i = 0; i < m; ++i) yc[i] += xc[i];
    round_span(type, yc, y16 ? y16 + lo : nullptr, m);
  });
}

// x's 16-bit patterns are widened a chunk at a time (exact), not into a whole-tensor copy.
void CpuBackend::gelu_backward_round(DType type, const float* dy, Operand x, float* dx, std::uint16_t* dx16,
                                     std::size_t n) {
  if (type == DType::f32) return gelu_backward(dy, x, dx, n);
  require(x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16,
          "internal: gelu_backward_round's x is of no known type");
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    alignas(64) float widened_x[cpu::kChunk];
    const float* xc;
    if (x.dtype == DType::f32) {
      xc = static_cast<const float*>(x.data) + lo;
    } else {
      const auto* bits = static_cast<const std::uint16_t*>(x.data) + lo;
      if (x.dtype == DType::bf16) bf16_to_floats(bits, widened_x, m);
      else half_to_floats(bits, widened_x, m);
      xc = widened_x;
    }
    const float* dyc = dy + lo;
    float* dxc = dx + lo;
    cpu::gelu_grad_span(dyc, xc, dxc, m);
    round_span(type, dxc, dx16 ? dx16 + lo : nullptr, m);
  });
}

}  // namespace avtrain
