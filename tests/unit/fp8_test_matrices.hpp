#pragma once
// Test matrices for the FP8 product tests: normal values spread over exp(+-spread) in magnitude, and
// their largest magnitude computed plainly (the tests' own amax, not the code under test's).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/keyed_random.hpp"

namespace avtrain {

inline std::vector<float> random_matrix(KeyedRandom& random, std::size_t n, double spread) {
  std::vector<float> m(n);
  for (float& v : m) v = float(random.normal() * std::exp(random.uniform(-spread, spread)));
  return m;
}

inline float amax_of(const std::vector<float>& m) {
  float a = 0;
  for (float v : m) a = std::max(a, std::fabs(v));
  return a;
}

}  // namespace avtrain
