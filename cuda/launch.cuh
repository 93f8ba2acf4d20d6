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

}  // namespace avtrain::cuda
