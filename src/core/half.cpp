#include "core/half.hpp"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace avtrain {

void floats_to_half(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

void half_to_floats(const std::uint16_t* in, float* out, std::size_t n) {
  std::size_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
#endif
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

// No bf16 instructions are assumed: the integer rounding below vectorises as written.
void floats_to_bf16(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t x = float_bits(in[i]);
    const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const std::uint32_t quiet_nan = (x >> 16) | 0x40u;
    out[i] = std::uint16_t((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

void round_to_half(float* x, std::uint16_t* packed, std::size_t n) {
  std::size_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (packed) _mm_storeu_si128(reinterpret_cast<__m128i*>(packed + i), h);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) {
    const std::uint16_t h = float_to_half(x[i]);
    if (packed) packed[i] = h;
    x[i] = half_to_float(h);
  }
}

void round_to_bf16(float* x, std::uint16_t* packed, std::size_t n) {
  if (packed) {
    floats_to_bf16(x, packed, n);
    bf16_to_floats(packed, x, n);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = float_bits(x[i]);
    const std::uint32_t rounded = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
    const std::uint32_t quiet_nan = u | 0x400000u;
    x[i] = bits_float((u & 0x7fffffffu) > 0x7f800000u ? (quiet_nan & 0xffff0000u) : rounded);
  }
}

void bf16_to_floats(const std::uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = bits_float(std::uint32_t(in[i]) << 16);
}

}  // namespace avtrain
