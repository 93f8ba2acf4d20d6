#pragma once
// Launch shape shared by the one-dimensional kernels: blocks of kThreads threads, a grid of
// ceil(n / kThreads) blocks capped at max_blocks, and a grid-stride loop over the elements:
//   for (std::size_t i = first_index(); i < n; i += grid_stride()) ...
#include <algorithm>
#include <cstddef>

namespace avtrain::cuda {

constexpr int kThreads = 256;
constexpr std::size_t kMaxGridBlocks = std::size_t(1) << 16;

inline unsigned blocks_for(std::size_t n, std::size_t max_blocks = kMaxGridBlocks) {
  return unsigned(std::min((n + kThreads - 1) / kThreads, max_blocks));
}

__device__ inline std::size_t first_index() { return blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; }
__device__ inline std::size_t grid_stride() { return std::size_t(gridDim.x) * blockDim.x; }

// Row kernels: one warp per row, kRowsPerBlock rows per block of dim3(kWarp, kRowsPerBlock).
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
inline unsigned row_blocks(std::size_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// Butterfly reductions over a full warp: every lane gets the result.
__device__ inline float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Bytes rounded up to 256, so that pieces carved out of one scratch block stay aligned.
inline std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace avtrain::cuda
