#include "core/fp8.hpp"

#include <array>
#include <cmath>

namespace avtrain {

namespace {

template <std::uint8_t (*encode)(float)>
void quantize(const float* in, float scale, std::uint8_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = encode(in[i] * scale);
}

// The codes of in[i] * scale and what the cast did (Fp8CastStats): |x| as fp32 bits orders as the
// values do, a NaN's above inf's, so integer max and min find the amax (NaN let through) and the
// smallest non-zero |x| (NaN passed over: its bits are above every finite value's and inf's).
template <std::uint8_t (*encode)(float)>
Fp8CastStats quantize_counted(const float* in, float scale, float largest, std::uint8_t* out, std::size_t n) {
  constexpr std::uint32_t kInfBits = 0x7F800000u;
  std::uint32_t amax = 0, min_nonzero = 0xFFFFFFFFu;
  std::size_t underflow = 0, saturated = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float scaled = in[i] * scale;
    const std::uint8_t code = encode(scaled);
    out[i] = code;
    const std::uint32_t a = float_bits(in[i]) & 0x7FFFFFFFu;
    amax = a > amax ? a : amax;
    if (a != 0 && a <= kInfBits && a < min_nonzero) min_nonzero = a;
    underflow += (a != 0 && (code & 0x7Fu) == 0) ? 1 : 0;
    saturated += std::fabs(scaled) > largest ? 1 : 0;
  }
  Fp8CastStats s;
  s.amax = bits_float(amax);
  s.min_nonzero = min_nonzero == 0xFFFFFFFFu ? 0.0f : bits_float(min_nonzero);
  s.underflow = double(underflow);
  s.saturated = double(saturated);
  return s;
}

// Every pattern's value, decoded once: a table lookup is the fastest exact decode on a CPU.
template <float (*decode)(std::uint8_t)>
const std::array<float, 256>& values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) t[v] = decode(std::uint8_t(v));
    return t;
  }();
  return table;
}

}  // namespace

void quantize_fp8(Fp8Format f, const float* in, float scale, std::uint8_t* out, std::size_t n) {
  if (f == Fp8Format::e4m3)
    quantize<float_to_e4m3>(in, scale, out, n);
  else
    quantize<float_to_e5m2>(in, scale, out, n);
}

void Fp8CastStats::fold(const Fp8CastStats& other) {
  amax = std::isnan(amax) || std::isnan(other.amax) ? NAN : std::fmax(amax, other.amax);
  if (other.min_nonzero != 0.0f && (min_nonzero == 0.0f || other.min_nonzero < min_nonzero))
    min_nonzero = other.min_nonzero;
  underflow += other.underflow;
  saturated += other.saturated;
}

Fp8CastStats quantize_fp8_counted(Fp8Format f, const float* in, float scale, std::uint8_t* out, std::size_t n) {
  if (f == Fp8Format::e4m3) return quantize_counted<float_to_e4m3>(in, scale, kFp8E4M3Max, out, n);
  return quantize_counted<float_to_e5m2>(in, scale, kFp8E5M2Max, out, n);
}

void dequantize_fp8(Fp8Format f, const std::uint8_t* in, float factor, float* out, std::size_t n) {
  const std::array<float, 256>& value = f == Fp8Format::e4m3 ? values<e4m3_to_float>() : values<e5m2_to_float>();
  for (std::size_t i = 0; i < n; ++i) out[i] = value[in[i]] * factor;
}

// The bits of |x| order as the values do, and a NaN's above inf's: an integer maximum finds the amax
// and lets a NaN through, and vectorises.
float abs_max(const float* in, std::size_t n) {
  std::uint32_t largest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = float_bits(in[i]) & 0x7FFFFFFFu;
    largest = a > largest ? a : largest;
  }
  return bits_float(largest);
}

}  // namespace avtrain
