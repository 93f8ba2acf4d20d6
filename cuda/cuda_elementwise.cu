// Elementwise ops, the bias gradient (a column sum, of fp32 or 16-bit values) and the exact (erf) GELU.
#include <algorithm>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "elementwise_math.cuh"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {
__global__ void fill_kernel(float* x, std::size_t n, float value) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) x[i] = value;
}

__global__ void add_kernel(float* y, const float* x, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] += x[i];
}

__global__ void scale_kernel(float* x, std::size_t n, float a) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) x[i] *= a;
}

__global__ void fill_rows_kernel(float* y, const float* row, std::size_t n, std::size_t cols) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = row[i % cols];
}

// A block sums kBiasColumns columns: each of its kBiasLanes lanes sums every kBiasLanes-th row in
// order, then the lanes are added in a fixed tree, so the result has the same bits on every run.
constexpr int kBiasColumns = 32, kBiasLanes = 32;

// dy in fp32 or as 16-bit patterns read as their values: the same sums of the same values.
__global__ void bias_grad_kernel(Operand dy, float* dbias, int rows, int cols) {
  __shared__ float partial[kBiasLanes][kBiasColumns + 1];  // +1: lanes of one column in distinct banks
  const int c = blockIdx.x * kBiasColumns + threadIdx.x;
  float sum = 0.0f;
  if (c < cols)
    for (int r = threadIdx.y; r < rows; r += kBiasLanes) sum += value_at(dy, std::size_t(r) * cols + c);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  for (int half = kBiasLanes / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols) dbias[c] += partial[0][threadIdx.x];
}

__global__ void gelu_forward_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = gelu(x[i]);
}

// d/dx x*Phi(x) = Phi(x) + x*phi(x); dx may be x: each element is read before it is written.
__global__ void gelu_backward_kernel(const float* dy, Operand x, float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) dx[i] = dy[i] * gelu_grad(value_at(x, i));
}
}  // namespace

void CudaBackend::fill(float* x, std::size_t n, float value) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, n, value);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::add(float* y, const float* x, std::size_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(y, x, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::scale(float* x, std::size_t n, float a) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, n, a);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::fill_rows(float* y, const float* row, int rows, int cols) {
  const std::size_t n = std::size_t(std::max(rows, 0)) * std::size_t(std::max(cols, 0));
  if (n == 0) return;
  fill_rows_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(y, row, n, std::size_t(cols));
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::bias_grad(Operand dy, float* dbias, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return;
  const unsigned blocks = unsigned((cols + kBiasColumns - 1) / kBiasColumns);
  bias_grad_kernel<<<blocks, dim3(kBiasColumns, kBiasLanes), 0, stream_>>>(dy, dbias, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_forward(const float* x, float* y, std::size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, y, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_backward(const float* dy, Operand x, float* dx, std::size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(dy, x, dx, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace avtrain::cuda
