#pragma once
// Random numbers that are the same on every platform and standard library: std::mt19937_64 is specified
// bit for bit, the distributions of <random> are not, so the mappings to uniform and normal are ours.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace avtrain::data {

// SplitMix64 (Steele, Lea, Flood 2014): turns nearby keys into unrelated seeds.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class PortableRandom {
 public:
  explicit PortableRandom(std::uint64_t seed) : engine_(seed) {}

  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double low, double high) { return low + (high - low) * uniform(); }
  std::int64_t integer(std::int64_t low, std::int64_t high) {  // inclusive
    const auto span = static_cast<double>(high - low + 1);
    return std::min(high, low + static_cast<std::int64_t>(uniform() * span));
  }
  // Box-Muller, cosine branch only.
  double normal() {
    const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform()));
    return radius * std::cos(2.0 * std::numbers::pi * uniform());
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace avtrain::data
