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
  else require(type == DType::f32, std::string("internal: a fused pass rounding to ") + dtype_name(type));
}

}  // namespace

void CpuBackend::linear_forward(DType type, Operand x, Operand w, const float* bias, Output y, int rows, int in,
                                int out) {
  if (!bands_rows(rows, out)) return Backend::linear_forward(type, x, w, bias, y, rows, in, out);
  float* yv = y.values;
  auto* y16 = static_cast<std::uint16_t*>(y.copy.data);
  const DType rounded_to = y.dtype();
  const RowBandStep fill = [&](int lo, int hi) {
    for (int r = lo; r < hi; ++r) std::memcpy(yv + std::size_t(r) * out, bias, sizeof(float) * out);
  };
  const RowBandStep round = [&](int lo, int hi) {
    const std::size_t at = std::size_t(lo) * out;
    round_span(rounded_to, yv + at, y16 ? y16 + at : nullptr, std::size_t(hi - lo) * out);
  };
  gemm_in_bands(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, bias ? 1.0f : 0.0f, yv, out,
                bias ? fill : RowBandStep(), rounded_to == DType::f32 ? RowBandStep() : round);
}

void CpuBackend::linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, Output f, Output g, int rows,
                                     int in, int out) {
  if (!bands_rows(rows, out)) return Backend::linear_gelu_forward(type, x, w, bias, f, g, rows, in, out);
  float* fv = f.values;
  float* gv = g.values;
  auto* f16 = static_cast<std::uint16_t*>(f.copy.data);
  auto* g16 = static_cast<std::uint16_t*>(g.copy.data);
  const DType f_type = f.dtype(), g_type = g.dtype();
  const RowBandStep fill = [&](int lo, int hi) {
    for (int r = lo; r < hi; ++r) std::memcpy(fv + std::size_t(r) * out, bias, sizeof(float) * out);
  };
  const RowBandStep round_gelu_round = [&](int lo, int hi) {
    const std::size_t at = std::size_t(lo) * out, n = std::size_t(hi - lo) * out;
    float* fb = fv + at;
    float* gb = gv + at;
    round_span(f_type, fb, f16 ? f16 + at : nullptr, n);
    cpu::gelu_span(fb, gb, n);
    round_span(g_type, gb, g16 ? g16 + at : nullptr, n);
  };
  gemm_in_bands(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, bias ? 1.0f : 0.0f, fv, out,
                bias ? fill : RowBandStep(), round_gelu_round);
}

void CpuBackend::add_round(Output y, const float* x, std::size_t n) {
  const DType type = y.dtype();
  if (type == DType::f32) return add(y.values, x, n);
  auto* y16 = static_cast<std::uint16_t*>(y.copy.data);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    float* yc = y.values + lo;
    const float* xc = x + lo;
#pragma omp simd
    for (std::size_t i = 0; i < m; ++i) yc[i] += xc[i];
    round_span(type, yc, y16 ? y16 + lo : nullptr, m);
  });
}

// x's 16-bit patterns are widened a chunk at a time (exact), not into a whole-tensor copy.
void CpuBackend::gelu_backward_round(const float* dy, Operand x, Output dx, std::size_t n) {
  const DType type = dx.dtype();
  if (type == DType::f32) return gelu_backward(dy, x, dx.values, n);
  require(x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16,
          "internal: gelu_backward_round's x is of no known type");
  auto* dx16 = static_cast<std::uint16_t*>(dx.copy.data);
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
    float* dxc = dx.values + lo;
    cpu::gelu_grad_span(dyc, xc, dxc, m);
    round_span(type, dxc, dx16 ? dx16 + lo : nullptr, m);
  });
}

}  // namespace avtrain
