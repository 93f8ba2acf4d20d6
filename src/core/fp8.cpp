#include "core/fp8.hpp"

#include <array>

namespace avtrain {

namespace {

template <std::uint8_t (*encode)(float)>
void quantize(const float* in, float scale, std::uint8_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = encode(in[i] * scale);
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
