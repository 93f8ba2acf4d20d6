#pragma once
// A random stream keyed by (seed, name) or (seed, numbers): splitmix64 over an FNV-1a key, with
// its own uniform and normal maps, so results never depend on the standard library or the rank.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/host_device.hpp"

namespace avtrain {

inline std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// splitmix64's finaliser; also a device function (core/stochastic_round.hpp draws with it in kernels).
AVTRAIN_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class KeyedRandom {
 public:
  KeyedRandom(std::uint64_t seed, std::string_view name) : state_(mix64(seed) ^ fnv1a(name)) {}
  KeyedRandom(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0)
      : state_(mix64(seed ^ mix64(a + 0x9e3779b97f4a7c15ull * (b + 1)))) {}

  std::uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  double uniform(double low, double high) { return low + (high - low) * uniform(); }
  // Uniform integer in [low, high], both included.
  std::int64_t integer(std::int64_t low, std::int64_t high) { return low + std::int64_t(below(std::uint64_t(high - low + 1))); }
  // Uniform integer in [0, n) without modulo bias.
  std::uint64_t below(std::uint64_t n) {
    std::uint64_t limit = ~std::uint64_t(0) - (~std::uint64_t(0) % n);
    std::uint64_t r;
    do r = next(); while (r >= limit);
    return r % n;
  }
  // Standard normal by Box-Muller.
  double normal() {
    if (has_spare_) { has_spare_ = false; return spare_; }
    double u1 = uniform(), u2 = uniform();
    double r = std::sqrt(-2.0 * std::log(1.0 - u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

 private:
  std::uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace avtrain
