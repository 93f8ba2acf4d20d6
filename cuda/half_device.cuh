#pragma once
// The fp32 <-> fp16/bf16 conversions of core/half.hpp for host and device code: the same
// algorithm step for step, so a GPU gives the same bits as the CPU (round to nearest even,
// subnormals, overflow to inf, NaN made quiet with its top payload bits kept).
#include <cstdint>
#include <cstring>

namespace avtrain::cuda {

__host__ __device__ inline std::uint32_t bits_of(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

__host__ __device__ inline float float_of(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

__host__ __device__ inline std::uint16_t to_half(float value) {
  constexpr std::uint32_t f32_inf = 255u << 23;
  constexpr std::uint32_t f16_overflow = (127u + 16u) << 23;                               // 65536.0f
  constexpr std::uint32_t denormal_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;  // 0.5f
  std::uint32_t x = bits_of(value);
  const std::uint32_t sign = x & 0x80000000u;
  x ^= sign;
  std::uint16_t h;
  if (x >= f16_overflow) {
    h = x > f32_inf ? std::uint16_t(0x7e00u | ((x >> 13) & 0x3ffu)) : std::uint16_t(0x7c00u);
  } else if (x < (113u << 23)) {
    // Subnormal or zero in fp16: one fp32 add, rounded to nearest even, places the bits.
    h = std::uint16_t(bits_of(float_of(x) + float_of(denormal_magic)) - denormal_magic);
  } else {
    const std::uint32_t mantissa_odd = (x >> 13) & 1u;
    x += (std::uint32_t(15 - 127) << 23) + 0xfffu + mantissa_odd;  // rebias, round to nearest even
    h = std::uint16_t(x >> 13);                                       // a carry into inf is correct
  }
  return std::uint16_t(h | (sign >> 16));
}

__host__ __device__ inline float from_half(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0u));
  if (exponent == 0) return float_of(sign | bits_of(float(mantissa) * 0x1p-24f));  // exact
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

__host__ __device__ inline std::uint16_t to_bf16(float value) {
  const std::uint32_t x = bits_of(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((x >> 16) | 0x40u);
  return std::uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

__host__ __device__ inline float from_bf16(std::uint16_t b) { return float_of(std::uint32_t(b) << 16); }

}  // namespace avtrain::cuda
