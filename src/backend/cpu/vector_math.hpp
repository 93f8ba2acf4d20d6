#pragma once
// Branch-free exp and erf that the compiler vectorises (libm's scalar calls do not; keep the
// clamps as ?: — GCC 12 does not vectorise fminf/fmaxf builtins here), accurate to
// a few float ulps: exp by 2^n * Taylor(7) on |r| <= ln2/2; erf by its Maclaurin series for
// |x| < 0.5 and Abramowitz & Stegun 7.1.26 beyond (|error| <= 1.5e-7 + float rounding).
#include <cstdint>
#include <cstring>

namespace avtrain::vmath {

inline float exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // Round to nearest by adding and removing 1.5 * 2^23.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) << 23) + (127 << 23);
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);  // 2^n
  return p * scale;
}

inline float erf(float x) {
  // Near 0 the rational form subtracts nearly equal numbers: use the Maclaurin series there
  // (through x^13: relative error < 2e-8 for |x| < 0.5).
  const float x2 = x * x;
  float series = -1.0f / 75600.0f;
  series = series * x2 + 1.0f / 9360.0f;
  series = series * x2 - 1.0f / 1320.0f;
  series = series * x2 + 1.0f / 216.0f;
  series = series * x2 - 1.0f / 42.0f;
  series = series * x2 + 1.0f / 10.0f;
  series = series * x2 - 1.0f / 3.0f;
  series = series * x2 + 1.0f;
  series *= 1.12837916709551257f * x;  // 2 / sqrt(pi)
  const float a = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  const float y = 1.0f - poly * t * exp(-a * a);
  const float rational = x < 0.0f ? -y : y;
  return a < 0.5f ? series : rational;
}

}  // namespace avtrain::vmath
