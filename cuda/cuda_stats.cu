// Whole-tensor reductions: sum of squares (in double), largest magnitude, and the gradient
// statistics of layers.csv, returned to the host or folded into a result on the device. Two passes,
// each block then one block over the block results, every sum in a fixed order: the grid depends
// only on n, so the bits repeat run to run. The statistics of many tensors at once cut them into
// fixed chunks (one block each), then add each tensor's chunks in order; tensor_stats_many_into
// leaves their totals on the device for the update's gate (cuda_adamw.cu).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <limits>
#include <vector>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "elementwise_math.cuh"
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

// 16-bit patterns read as their values (exact), for the reductions over a kept 16-bit copy.
struct Widened16 {
  DType type;
  const std::uint16_t* x;
  __device__ float operator[](std::size_t i) const { return value_at(Operand{x, type}, i); }
};

template <typename R, typename X>
__global__ void __launch_bounds__(kThreads) reduce_blocks(X x, std::size_t n, R r, typename R::Value* partial) {
  typename R::Value v = r.identity();
  const std::size_t stride = std::size_t(gridDim.x) * kThreads;
  for (std::size_t i = blockIdx.x * std::size_t(kThreads) + threadIdx.x; i < n; i += stride) v = r.combine(v, r.of(x[i]));
  v = block_reduce(v, r);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

// What the last pass does with the total: store it, or fold it into a running result.
template <typename Value>
struct StoreTo {
  Value* total;
  __device__ void operator()(const Value& v) const { *total = v; }
};
struct MaxBitsInto {  // |max| as bits: NaN patterns lie above +inf
  std::uint32_t* total;
  __device__ void operator()(std::uint32_t v) const { *total = v > *total ? v : *total; }
};
struct AddInto {
  double* total;
  __device__ void operator()(double v) const { *total += v; }
};

template <typename R, typename Out>
__global__ void __launch_bounds__(kThreads) reduce_partials(const typename R::Value* partial, unsigned count, R r,
                                                            Out out) {
  typename R::Value v = r.identity();
  for (unsigned i = threadIdx.x; i < count; i += kThreads) v = r.combine(v, partial[i]);
  v = block_reduce(v, r);
  if (threadIdx.x == 0) out(v);
}

// Both passes over x on the stream; the total goes to out. n > 0.
template <typename R, typename Out, typename X>
void enqueue_reduce(CudaBackend& backend, X x, std::size_t n, R r, Out out) {
  using Value = typename R::Value;
  const unsigned blocks = blocks_for(n, kMaxBlocks);
  auto* partial = static_cast<Value*>(backend.scratch(blocks * sizeof(Value)));
  reduce_blocks<<<blocks, kThreads, 0, backend.stream()>>>(x, n, r, partial);
  CUDA_CHECK_LAUNCH();
  reduce_partials<<<1, kThreads, 0, backend.stream()>>>(partial, blocks, r, out);
  CUDA_CHECK_LAUNCH();
}

template <typename R, typename X>
typename R::Value reduce(CudaBackend& backend, X x, std::size_t n, R r) {
  using Value = typename R::Value;
  if (n == 0) return r.identity();
  const unsigned blocks = blocks_for(n, kMaxBlocks);
  auto* total = static_cast<Value*>(backend.scratch((blocks + 1) * sizeof(Value))) + blocks;
  enqueue_reduce(backend, x, n, r, StoreTo<Value>{total});
  auto* result = static_cast<Value*>(backend.host_result(sizeof(Value)));
  CUDA_CHECK(cudaMemcpyAsync(result, total, sizeof(Value), cudaMemcpyDeviceToHost, backend.stream()));
  CUDA_CHECK(cudaStreamSynchronize(backend.stream()));
  return *result;
}

// Many tensors: chunks of at most kChunk elements, none spanning two tensors.
constexpr std::size_t kChunk = std::size_t(1) << 16;
struct Chunk {
  std::size_t begin, end;  // in x
};

__global__ void __launch_bounds__(kThreads) stats_of_chunks(const float* x, const Chunk* chunks, GradientStats r,
                                                            GradientStats::Value* partial) {
  const Chunk c = chunks[blockIdx.x];
  GradientStats::Value v = r.identity();
  for (std::size_t i = c.begin + threadIdx.x; i < c.end; i += kThreads) v = r.combine(v, r.of(x[i]));
  v = block_reduce(v, r);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

// Block s adds tensor s's chunks [first[s], first[s + 1]) in order.
__global__ void __launch_bounds__(kThreads) stats_of_tensors(const GradientStats::Value* partial, const unsigned* first,
                                                             GradientStats r, GradientStats::Value* out) {
  GradientStats::Value v = r.identity();
  for (unsigned i = first[blockIdx.x] + threadIdx.x; i < first[blockIdx.x + 1]; i += kThreads)
    v = r.combine(v, partial[i]);
  v = block_reduce(v, r);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}

}  // namespace

double CudaBackend::sum_squares(const float* x, std::size_t n) { return reduce(*this, x, n, SumSquares{}); }

namespace {
float abs_max_of_bits(std::uint32_t bits) {
  if (bits > 0x7f800000u) return std::numeric_limits<float>::quiet_NaN();
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}
}  // namespace

// A 16-bit copy: the same passes over the widened values, the fp32 values' bits.
float CudaBackend::abs_max(Operand x, std::size_t n) {
  if (x.dtype == DType::f32)
    return abs_max_of_bits(reduce(*this, static_cast<const float*>(x.data), n, AbsMaxBits{}));
  return abs_max_of_bits(reduce(*this, Widened16{x.dtype, static_cast<const std::uint16_t*>(x.data)}, n, AbsMaxBits{}));
}

// One tensor is the many-tensor pass over one span: the two give the same bits.
Backend::TensorStats CudaBackend::tensor_stats(const float* x, std::size_t n, float threshold) {
  const Span whole{0, n};
  TensorStats stats;
  tensor_stats_many(x, &whole, 1, threshold, &stats);
  return stats;
}

void CudaBackend::abs_max_into(Operand x, std::size_t n, float* result) {
  if (!n) return;
  const MaxBitsInto into{reinterpret_cast<std::uint32_t*>(result)};
  if (x.dtype == DType::f32) enqueue_reduce(*this, static_cast<const float*>(x.data), n, AbsMaxBits{}, into);
  else enqueue_reduce(*this, Widened16{x.dtype, static_cast<const std::uint16_t*>(x.data)}, n, AbsMaxBits{}, into);
}

void CudaBackend::sum_squares_into(const float* x, std::size_t n, double* result) {
  if (n) enqueue_reduce(*this, x, n, SumSquares{}, AddInto{result});
}

namespace {
// The passes of many tensors' statistics: chunks of at most kChunk elements (none spanning two
// tensors), the first chunk of each tensor, and where they go in scratch.
struct StatsPlan {
  std::vector<char> host;  // the chunks, then the first chunk of each tensor (chunk_bytes in)
  std::size_t chunks = 0, tensors = 0, chunk_bytes = 0, partial_bytes = 0;
};

StatsPlan plan_stats(const Backend::Span* spans, int count) {
  std::vector<Chunk> chunks;
  std::vector<unsigned> first(std::size_t(count) + 1);
  for (int s = 0; s < count; ++s) {
    first[s] = unsigned(chunks.size());
    for (std::size_t b = 0; b < spans[s].size; b += kChunk)
      chunks.push_back({spans[s].offset + b, spans[s].offset + std::min(spans[s].size, b + kChunk)});
  }
  first[count] = unsigned(chunks.size());
  StatsPlan p;
  p.chunks = chunks.size();
  p.tensors = std::size_t(count);
  p.chunk_bytes = aligned(chunks.size() * sizeof(Chunk));
  p.partial_bytes = aligned(chunks.size() * sizeof(GradientStats::Value));
  p.host.resize(p.chunk_bytes + first.size() * sizeof(unsigned));
  if (!chunks.empty()) std::memcpy(p.host.data(), chunks.data(), chunks.size() * sizeof(Chunk));
  std::memcpy(p.host.data() + p.chunk_bytes, first.data(), first.size() * sizeof(unsigned));
  return p;
}

// Both passes on the stream: the plan on the device (`plan`), the chunks' partials in `partial`
// (scratch of p.partial_bytes), the totals to `result` (device memory).
void enqueue_stats(cudaStream_t stream, const float* x, const StatsPlan& p, const void* plan, void* partial,
                   float threshold, GradientStats::Value* result) {
  using Value = GradientStats::Value;
  const auto* d_chunks = static_cast<const Chunk*>(plan);
  const auto* d_first = reinterpret_cast<const unsigned*>(static_cast<const char*>(plan) + p.chunk_bytes);
  auto* d_partial = static_cast<Value*>(partial);
  const GradientStats r{threshold};
  if (p.chunks) {
    stats_of_chunks<<<unsigned(p.chunks), kThreads, 0, stream>>>(x, d_chunks, r, d_partial);
    CUDA_CHECK_LAUNCH();
  }
  stats_of_tensors<<<unsigned(p.tensors), kThreads, 0, stream>>>(d_partial, d_first, r, result);
  CUDA_CHECK_LAUNCH();
}

// The device's totals are TensorStats as the host reads them (a double and three 64-bit counts).
static_assert(sizeof(GradientStats::Value) == sizeof(Backend::TensorStats) &&
                  offsetof(Backend::TensorStats, nonfinite) == offsetof(GradientStats::Value, nonfinite) &&
                  offsetof(Backend::TensorStats, nonzero) == offsetof(GradientStats::Value, nonzero) &&
                  offsetof(Backend::TensorStats, below) == offsetof(GradientStats::Value, below) &&
                  sizeof(std::size_t) == sizeof(unsigned long long),
              "TensorStats and the device's totals differ in layout");
}  // namespace

const void* CudaBackend::stats_plan_on_device(const Span* spans, int count, const void* plan, std::size_t bytes) {
  std::vector<std::size_t> key;
  key.reserve(2 * std::size_t(count));
  for (int s = 0; s < count; ++s) key.insert(key.end(), {spans[s].offset, spans[s].size});
  if (stats_plan_ && key == stats_plan_spans_) return stats_plan_;
  if (bytes > stats_plan_bytes_) {
    if (stats_plan_) deallocate(stats_plan_);
    stats_plan_ = nullptr;
    stats_plan_bytes_ = 0;
    stats_plan_ = allocate(bytes);
    stats_plan_bytes_ = bytes;
  }
  CUDA_CHECK(cudaMemcpyAsync(stats_plan_, plan, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host plan goes out of scope
  stats_plan_spans_ = std::move(key);
  return stats_plan_;
}

// The totals into scratch (after the partials), then one return to the host.
void CudaBackend::tensor_stats_many(const float* x, const Span* spans, int count, float threshold, TensorStats* out) {
  if (count <= 0) return;
  const StatsPlan p = plan_stats(spans, count);
  const void* plan = stats_plan_on_device(spans, count, p.host.data(), p.host.size());
  const std::size_t total_bytes = std::size_t(count) * sizeof(TensorStats);
  char* base = static_cast<char*>(scratch(p.partial_bytes + total_bytes));
  auto* total = reinterpret_cast<GradientStats::Value*>(base + p.partial_bytes);
  enqueue_stats(stream_, x, p, plan, base, threshold, total);
  auto* result = static_cast<TensorStats*>(host_result(total_bytes));
  CUDA_CHECK(cudaMemcpyAsync(result, total, total_bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::copy(result, result + count, out);
}

void CudaBackend::tensor_stats_many_into(const float* x, const Span* spans, int count, float threshold,
                                         TensorStats* result) {
  if (count <= 0) return;
  const StatsPlan p = plan_stats(spans, count);
  const void* plan = stats_plan_on_device(spans, count, p.host.data(), p.host.size());
  enqueue_stats(stream_, x, p, plan, scratch(p.partial_bytes), threshold,
                reinterpret_cast<GradientStats::Value*>(result));
}

}  // namespace avtrain::cuda
