#pragma once
// The two 8-bit floating-point formats of FP8 training (Micikevicius et al. 2022, "FP8 Formats for
// Deep Learning"; the __nv_fp8_e4m3 / __nv_fp8_e5m2 of cuda_fp8.h):
//   E4M3 ("fn"): bias 7, no infinities, S.1111.111 is NaN, largest 448, smallest subnormal 2^-9;
//   E5M2: IEEE-like, bias 15, S.11111.00 is inf, S.11111.xx NaN, largest 57344, smallest 2^-16.
// fp32 -> fp8 rounds to nearest even and SATURATES: a finite value beyond the largest, and +-inf,
// become +-largest (CUDA's __NV_SATFINITE, cvt.rn.satfinite, what Transformer Engine casts with);
// NaN becomes 0x7F (NaN in both formats, sign dropped, as __nv_cvt_float_to_fp8 does); the sign of
// zero is kept. fp8 -> fp32 is exact. The scalar versions are also device functions under nvcc.
#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "core/enum_names.hpp"
#include "core/half.hpp"  // float_bits, bits_float, AVTRAIN_HOST_DEVICE

namespace avtrain {

enum class Fp8Format : unsigned char { e4m3, e5m2 };
// The format of an fp8 storage type (DType::e4m3 or DType::e5m2).
constexpr Fp8Format fp8_format(DType t) { return t == DType::e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2; }
constexpr EnumNames<Fp8Format, 2> enum_names(Fp8Format) {
  return {{{Fp8Format::e4m3, "e4m3"}, {Fp8Format::e5m2, "e5m2"}}};
}

// The largest finite value of each format: 1.75 * 2^8 and 1.75 * 2^15.
constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;
constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::e4m3 ? kFp8E4M3Max : kFp8E5M2Max; }
constexpr std::uint8_t kFp8NaN = 0x7F;  // what a NaN converts to, in both formats

namespace fp8_detail {

// fp32 bits of |x| -> the fp8 code of |x| (no sign), for a format of `M` mantissa bits, exponent bias
// `B` and largest finite code `max_code`. Integer arithmetic only, without branches on the value, so
// that the array loops vectorise.
template <int M, int B, std::uint32_t max_code>
AVTRAIN_HOST_DEVICE inline std::uint32_t encode_magnitude(std::uint32_t a) {
  // At or above the smallest normal, 2^(1-B): drop 23-M mantissa bits rounding to nearest even (a
  // carry moves into the exponent, as it should), rebias, and clamp to the largest finite code.
  constexpr std::uint32_t min_normal_bits = std::uint32_t(127 + 1 - B) << 23;
  const std::uint32_t odd = (a >> (23 - M)) & 1u;
  const std::uint32_t rounded = (a + ((1u << (22 - M)) - 1u) + odd) >> (23 - M);
  const std::uint32_t rebias = std::uint32_t(127 - B) << M;
  const std::uint32_t normal_code = rounded - rebias;  // used only when a >= min_normal_bits
  const std::uint32_t normal = normal_code > max_code ? max_code : normal_code;
  // Below it: count units of the smallest subnormal, 2^(1-B-M), rounding to nearest even; a count of
  // 2^M is the smallest normal's code, which is right.
  const std::uint32_t biased_exponent = a >> 23;
  const std::uint32_t significand = (a & 0x7FFFFFu) | (biased_exponent ? 0x800000u : 0u);
  const std::uint32_t e = biased_exponent ? biased_exponent : 1u;
  // value = significand * 2^(e-150); units = value / 2^(1-B-M) = significand >> (151-B-M-e).
  const int raw_shift = 151 - B - M - int(e);
  const std::uint32_t shift = raw_shift < 1 ? 1u : raw_shift > 31 ? 31u : std::uint32_t(raw_shift);
  const std::uint32_t units = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t subnormal = units + ((rest > half || (rest == half && (units & 1u))) ? 1u : 0u);
  return a < min_normal_bits ? subnormal : normal;
}

template <int M, int B, std::uint32_t max_code>
AVTRAIN_HOST_DEVICE inline std::uint8_t encode(float x) {
  const std::uint32_t bits = float_bits(x);
  const std::uint32_t a = bits & 0x7FFFFFFFu;
  const std::uint32_t code = encode_magnitude<M, B, max_code>(a) | ((bits >> 24) & 0x80u);
  return std::uint8_t(a > 0x7F800000u ? kFp8NaN : code);
}

}  // namespace fp8_detail

AVTRAIN_HOST_DEVICE inline std::uint8_t float_to_e4m3(float x) { return fp8_detail::encode<3, 7, 0x7Eu>(x); }
AVTRAIN_HOST_DEVICE inline std::uint8_t float_to_e5m2(float x) { return fp8_detail::encode<2, 15, 0x7Bu>(x); }

AVTRAIN_HOST_DEVICE inline float e4m3_to_float(std::uint8_t v) {
  const std::uint32_t sign = std::uint32_t(v & 0x80u) << 24;
  const std::uint32_t exponent = (v >> 3) & 0xFu, mantissa = v & 0x7u;
  if ((v & 0x7Fu) == 0x7Fu) return bits_float(0x7FC00000u | sign);                   // NaN
  if (exponent == 0) return bits_float(sign | float_bits(float(mantissa) * 0x1p-9f));  // exact
  return bits_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

AVTRAIN_HOST_DEVICE inline float e5m2_to_float(std::uint8_t v) {
  const std::uint32_t sign = std::uint32_t(v & 0x80u) << 24;
  const std::uint32_t exponent = (v >> 2) & 0x1Fu, mantissa = v & 0x3u;
  if (exponent == 0x1F) return bits_float(sign | (mantissa ? 0x7FC00000u : 0x7F800000u));  // NaN, inf
  if (exponent == 0) return bits_float(sign | float_bits(float(mantissa) * 0x1p-16f));
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 21));
}

AVTRAIN_HOST_DEVICE inline std::uint8_t float_to_fp8(Fp8Format f, float x) {
  return f == Fp8Format::e4m3 ? float_to_e4m3(x) : float_to_e5m2(x);
}
AVTRAIN_HOST_DEVICE inline float fp8_to_float(Fp8Format f, std::uint8_t v) {
  return f == Fp8Format::e4m3 ? e4m3_to_float(v) : e5m2_to_float(v);
}

// Array conversions (host). quantize: out[i] = fp8(in[i] * scale), the product rounded to fp32
// first, as Transformer Engine's cast does; scale 1 is the plain conversion.
void quantize_fp8(Fp8Format f, const float* in, float scale, std::uint8_t* out, std::size_t n);
// out[i] = the value of in[i] (exact), times `factor` (a dequantizing 1/scale; 1 for the value alone).
void dequantize_fp8(Fp8Format f, const std::uint8_t* in, float factor, float* out, std::size_t n);
// The largest |in[i]|, NaN if some in[i] is NaN (an amax must see a non-finite tensor), 0 for n = 0.
float abs_max(const float* in, std::size_t n);

// What a cast to fp8 did to a tensor (layers.csv's fp8 columns), over the values x it quantized as
// fp8(x * scale): its amax (abs_max's), the smallest non-zero |x| (0: none; NaN passed over), how
// many non-zero values became a zero code (underflow: x * scale, rounded to fp32, below half the
// smallest subnormal, or a tie to zero) and how many had |x * scale| beyond the format's largest
// value (saturated to it; +-inf included). Counts in doubles, exact below 2^53. All zeros: nothing
// seen yet, what fold() starts from.
struct Fp8CastStats {
  float amax = 0.0f;
  float min_nonzero = 0.0f;
  double underflow = 0;
  double saturated = 0;
  // This and `other` as one tensor: the larger amax (NaN where either is), the smaller non-zero
  // minimum, the counts added.
  void fold(const Fp8CastStats& other);
};

// quantize_fp8 and, in the same pass, the statistics of the cast.
Fp8CastStats quantize_fp8_counted(Fp8Format f, const float* in, float scale, std::uint8_t* out, std::size_t n);

}  // namespace avtrain
