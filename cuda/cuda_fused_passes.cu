// The fused passes of the kernel interface (Backend::linear_forward, linear_gelu_forward, add_round,
// gelu_round, gelu_backward_round, accumulate_rounded) under device.fused: one pass over memory each
// where the layers' separate ops take two or three. Without device.fused, the defaults (the separate
// ops). Each element goes through the separate kernels' functions (elementwise_math.cuh), so
// add_round, gelu_round, gelu_backward_round and accumulate_rounded give their bits; linear_forward
// takes its product with beta 0 and adds the bias in the rounding pass (no fill_rows pass, no read of
// y by the product), which cuBLAS may sum in another order than the product with beta 1;
// linear_gelu_forward is that linear_forward with the GELU in the same pass (its bits).
#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "elementwise_math.cuh"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

// y[r, c] = round(y[r, c] + bias[c]) (bias may be null).
__global__ void bias_round_kernel(DType type, float* y, const float* bias, std::uint16_t* y16, std::size_t n,
                                  std::size_t cols) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = bias ? y[i] + bias[i % cols] : y[i];
    y[i] = round_in(type, v, y16 ? y16 + i : nullptr);
  }
}

// The same, and g = round(gelu(y)) (the MLP's first layer and its activation in one pass).
__global__ void bias_gelu_round_kernel(DType type, float* y, const float* bias, std::uint16_t* y16, float* g,
                                       std::uint16_t* g16, std::size_t n, std::size_t cols) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = round_in(type, bias ? y[i] + bias[i % cols] : y[i], y16 ? y16 + i : nullptr);
    y[i] = v;
    g[i] = round_in(type, gelu(v), g16 ? g16 + i : nullptr);
  }
}

__global__ void gelu_backward_round_kernel(DType type, const float* dy, Operand x, float* dx, std::uint16_t* dx16,
                                           std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    dx[i] = round_in(type, dy[i] * gelu_grad(value_at(x, i)), dx16 ? dx16 + i : nullptr);
}

__global__ void add_round_kernel(DType type, float* y, const float* x, std::uint16_t* y16, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = round_in(type, y[i] + x[i], y16 ? y16 + i : nullptr);
}

__global__ void gelu_round_kernel(DType type, const float* x, float* y, std::uint16_t* y16, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = round_in(type, gelu(x[i]), y16 ? y16 + i : nullptr);
}

__global__ void accumulate_rounded_kernel(DType type, float* acc, const float* x, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) acc[i] += round_in(type, x[i], nullptr);
}

}  // namespace

void CudaBackend::linear_forward(DType type, Operand x, Operand w, const float* bias, float* y, std::uint16_t* y16,
                                 int rows, int in, int out) {
  if (!options_.fused) return Backend::linear_forward(type, x, w, bias, y, y16, rows, in, out);
  gemm(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  const std::size_t n = std::size_t(rows) * out;
  if (n == 0 || (!bias && type == DType::f32)) return;
  bias_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(type, y, bias, y16, n, std::size_t(out));
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, float* f,
                                      std::uint16_t* f16, float* g, std::uint16_t* g16, int rows, int in, int out) {
  if (!options_.fused) return Backend::linear_gelu_forward(type, x, w, bias, f, f16, g, g16, rows, in, out);
  gemm(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, 0.0f, f, out);
  const std::size_t n = std::size_t(rows) * out;
  if (n == 0) return;
  bias_gelu_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(type, f, bias, f16, g, g16, n, std::size_t(out));
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_backward_round(DType type, const float* dy, Operand x, float* dx, std::uint16_t* dx16,
                                      std::size_t n) {
  if (!options_.fused) return Backend::gelu_backward_round(type, dy, x, dx, dx16, n);
  if (n == 0) return;
  gelu_backward_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(type, dy, x, dx, dx16, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::add_round(DType type, float* y, const float* x, std::uint16_t* y16, std::size_t n) {
  if (!options_.fused) return Backend::add_round(type, y, x, y16, n);
  if (n == 0) return;
  add_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(type, y, x, y16, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_round(DType type, const float* x, float* y, std::uint16_t* y16, std::size_t n) {
  if (!options_.fused) return Backend::gelu_round(type, x, y, y16, n);
  if (n == 0) return;
  gelu_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(type, x, y, y16, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::accumulate_rounded(DType type, float* acc, float* x, std::size_t n) {
  if (!options_.fused) return Backend::accumulate_rounded(type, acc, x, n);
  if (n == 0) return;
  accumulate_rounded_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(type, acc, x, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace avtrain::cuda
