#include "core/half.hpp"

#if (defined(__F16C__) && defined(__AVX__)) || (defined(__AVX512BF16__) && defined(__AVX512BW__))
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

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
namespace {
// 16 floats to bf16 with vcvtneps2bf16: round to nearest even, NaN made quiet by setting bit 6 of the
// pattern — float_to_bf16's bits — except that the instruction flushes subnormal inputs to zero
// (it neither reads nor writes MXCSR, so DAZ is not ours to clear): lanes whose exponent field is 0
// and whose magnitude is not, rare in practice, are redone by float_to_bf16.
inline __m256i bf16x16(const float* in) {
  const __m512 v = _mm512_loadu_ps(in);
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 subnormal = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)) &
                              _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x7fffffff));
  __m256i h = (__m256i)_mm512_cvtneps_pbh(v);  // the same 16 bits a lane, as integers
  if (__builtin_expect(subnormal != 0, 0)) {
    alignas(32) std::uint16_t lanes[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), h);
    for (int l = 0; l < 16; ++l)
      if ((subnormal >> l) & 1u) lanes[l] = float_to_bf16(in[l]);
    h = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
  }
  return h;
}

// The 16 patterns' values (each pattern the top half of its float). The zero-masked forms with every
// lane selected: GCC 12 warns of its own undefined pass-through in the unmasked ones.
inline __m512 bf16x16_values(__m256i h) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16));
}
}  // namespace
#endif

// Without bf16 instructions the integer rounding below vectorises as written.
void floats_to_bf16(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bf16x16(in + i));
#endif
  for (; i < n; ++i) {
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
  std::size_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  // One pass: each vector rounded, its patterns stored, its values written back.
  for (; i + 16 <= n; i += 16) {
    const __m256i h = bf16x16(x + i);
    if (packed) _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + i), h);
    _mm512_storeu_ps(x + i, bf16x16_values(h));
  }
#endif
  if (packed) {
    floats_to_bf16(x + i, packed + i, n - i);
    bf16_to_floats(packed + i, x + i, n - i);
    return;
  }
  for (; i < n; ++i) {
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
