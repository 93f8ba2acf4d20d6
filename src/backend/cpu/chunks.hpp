#pragma once
// Elementwise passes cut into fixed chunks run over the threads: a chunk is small enough to stay in
// a core's cache between the steps of a fused pass (cpu_fused.cpp), and where the chunks fall
// depends only on n, so the results are the same bits on any thread count.
#include <algorithm>
#include <cstddef>

#include "backend/cpu/cpu_backend.hpp"

namespace avtrain::cpu {

inline constexpr std::size_t kChunk = 8192;  // a multiple of every vector width

// f(lo, m) for the chunks [lo, lo + m) of [0, n), on the threads (one thread below kParallelMinElements).
template <typename F>
void over_chunks(std::size_t n, F f) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t lo = c * kChunk;
    f(lo, std::min(n, lo + kChunk) - lo);
  }
}

}  // namespace avtrain::cpu
