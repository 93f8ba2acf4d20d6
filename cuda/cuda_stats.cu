// Whole-tensor reductions returned to the host: sum of squares (in double), largest magnitude, and
// the gradient statistics of layers.csv. Two passes, each block then one block over the block
// results, every sum in a fixed order: the grid depends only on n, so the bits repeat run to run.
#include <cstdint>
#include <cstring>
#include <limits>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {
constexpr std::size_t kMaxBlocks = 1024;  // the second pass reduces the block results in one block

struct SumSquares {
  using Value = double;
  __host__ __device__ Value identity() const { return 0.0; }
  __device__ Value of(float x) const { return double(x) * x; }
  __device__ Value combine(Value a, Value b) const { return a + b; }
};

// On the bit patterns of |x|: integer order is magnitude order, and every NaN lies above +inf.
struct AbsMaxBits {
  using Value = std::uint32_t;
  __host__ __device__ Value identity() const { return 0u; }
  __device__ Value of(float x) const { return __float_as_uint(x) & 0x7fffffffu; }
  __device__ Value combine(Value a, Value b) const { return a > b ? a : b; }
};

struct GradientStats {
  struct Value {
    double sum_squares;
    unsigned long long nonfinite, nonzero, below;
  };
  float threshold;
  __host__ __device__ Value identity() const { return {0.0, 0, 0, 0}; }
  // As the CPU: NaN is nonfinite and nonzero, never below the threshold.
  __device__ Value of(float x) const {
    const float a = fabsf(x);
    return {double(x) * x, !(a <= 3.402823466e38f), a != 0.0f, a != 0.0f && a < threshold};
  }
  __device__ Value combine(const Value& a, const Value& b) const {
    return {a.sum_squares + b.sum_squares, a.nonfinite + b.nonfinite, a.nonzero + b.nonzero, a.below + b.below};
  }
};

// Pairwise tree over the block's threads in a fixed order; the result is thread 0's.
template <typename R>
__device__ typename R::Value block_reduce(typename R::Value v, const R& r) {
  __shared__ typename R::Value shared[kThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] = r.combine(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  return shared[0];
}

template <typename R>
__global__ void __launch_bounds__(kThreads) reduce_blocks(const float* x, std::size_t n, R r, typename R::Value* partial) {
  typename R::Value v = r.identity();
  const std::size_t stride = std::size_t(gridDim.x) * kThreads;
  for (std::size_t i = blockIdx.x * std::size_t(kThreads) + threadIdx.x; i < n; i += stride) v = r.combine(v, r.of(x[i]));
  v = block_reduce(v, r);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

template <typename R>
__global__ void __launch_bounds__(kThreads) reduce_partials(const typename R::Value* partial, unsigned count, R r,
                                                            typename R::Value* total) {
  typename R::Value v = r.identity();
  for (unsigned i = threadIdx.x; i < count; i += kThreads) v = r.combine(v, partial[i]);
  v = block_reduce(v, r);
  if (threadIdx.x == 0) *total = v;
}

template <typename R>
typename R::Value reduce(CudaBackend& backend, const float* x, std::size_t n, R r) {
  using Value = typename R::Value;
  if (n == 0) return r.identity();
  const unsigned blocks = blocks_for(n, kMaxBlocks);
  auto* partial = static_cast<Value*>(backend.scratch((blocks + 1) * sizeof(Value)));
  auto* result = static_cast<Value*>(backend.host_result(sizeof(Value)));
  reduce_blocks<<<blocks, kThreads, 0, backend.stream()>>>(x, n, r, partial);
  CUDA_CHECK_LAUNCH();
  reduce_partials<<<1, kThreads, 0, backend.stream()>>>(partial, blocks, r, partial + blocks);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaMemcpyAsync(result, partial + blocks, sizeof(Value), cudaMemcpyDeviceToHost, backend.stream()));
  CUDA_CHECK(cudaStreamSynchronize(backend.stream()));
  return *result;
}
}  // namespace

double CudaBackend::sum_squares(const float* x, std::size_t n) { return reduce(*this, x, n, SumSquares{}); }

float CudaBackend::abs_max(const float* x, std::size_t n) {
  const std::uint32_t bits = reduce(*this, x, n, AbsMaxBits{});
  if (bits > 0x7f800000u) return std::numeric_limits<float>::quiet_NaN();
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

Backend::TensorStats CudaBackend::tensor_stats(const float* x, std::size_t n, float threshold) {
  const GradientStats::Value v = reduce(*this, x, n, GradientStats{threshold});
  return {v.sum_squares, std::size_t(v.nonfinite), std::size_t(v.nonzero), std::size_t(v.below)};
}

}  // namespace avtrain::cuda
