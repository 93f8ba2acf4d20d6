#pragma once
// ZeRO stage 1 (parallel.zero = 1): the parts of a stage's flat buffers (n elements) that its dp
// replicas own, contiguous and in rank order: replica r owns [bounds[r], bounds[r + 1]). Parts are
// equal but for the last, and start at multiples of 64 elements (256 bytes) wherever n allows.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace avtrain::parallel {

inline std::vector<std::size_t> zero_parts(std::size_t n, int dp) {
  constexpr std::size_t kAlign = 64;
  const std::size_t per = (n + std::size_t(dp) - 1) / std::size_t(dp);
  const std::size_t part = (per + kAlign - 1) / kAlign * kAlign;
  std::vector<std::size_t> bounds;
  for (int r = 0; r <= dp; ++r) bounds.push_back(std::min(n, std::size_t(r) * part));
  return bounds;
}

// The parts of `bounds` inside [begin, end), as offsets from begin.
inline std::vector<std::size_t> parts_within(const std::vector<std::size_t>& bounds, std::size_t begin,
                                             std::size_t end) {
  std::vector<std::size_t> inner;
  for (std::size_t b : bounds) inner.push_back(std::clamp(b, begin, end) - begin);
  return inner;
}

}  // namespace avtrain::parallel
