#pragma once
// IEEE binary16 (fp16) and bfloat16 (bf16) storage types: conversion from fp32 with
// round-to-nearest-even, subnormals, overflow to +-inf, and NaN kept NaN (made quiet, top payload
// bits kept — what the x86 F16C instructions do). The array versions use F16C where the compiler
// targets it and give the same bits as the scalar versions everywhere. The scalar versions are
// also device functions under nvcc, so CUDA kernels convert with this same code.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/host_device.hpp"

namespace avtrain {

AVTRAIN_HOST_DEVICE inline std::uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

AVTRAIN_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// fp32 -> fp16 bits (after F. Giesen's float_to_half_fast3_rtne, NaN payload kept).
AVTRAIN_HOST_DEVICE inline std::uint16_t float_to_half(float value) {
  constexpr std::uint32_t f32_inf = 255u << 23;
  constexpr std::uint32_t f16_overflow = (127u + 16u) << 23;                   // 65536.0f
  constexpr std::uint32_t denormal_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;  // 0.5f
  std::uint32_t x = float_bits(value);
  const std::uint32_t sign = x & 0x80000000u;
  x ^= sign;
  std::uint16_t h;
  if (x >= f16_overflow) {
    h = x > f32_inf ? std::uint16_t(0x7e00u | ((x >> 13) & 0x3ffu)) : std::uint16_t(0x7c00u);
  } else if (x < (113u << 23)) {
    // Below 2^-14 the result is subnormal or zero: an fp32 add (round-to-nearest-even) does the rounding.
    h = std::uint16_t(float_bits(bits_float(x) + bits_float(denormal_magic)) - denormal_magic);
  } else {
    const std::uint32_t mantissa_odd = (x >> 13) & 1u;
    x += (std::uint32_t(15 - 127) << 23) + 0xfffu + mantissa_odd;  // rebias and round to nearest even
    h = std::uint16_t(x >> 13);                                       // a carry into inf is correct
  }
  return std::uint16_t(h | (sign >> 16));
}

AVTRAIN_HOST_DEVICE inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f)  // inf, or NaN made quiet
    return bits_float(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0u));
  if (exponent == 0) {   // zero or subnormal: mantissa * 2^-24, exact in fp32
    return bits_float(sign | float_bits(float(mantissa) * 0x1p-24f));
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// fp32 -> bf16 bits: keep the top 16 bits, rounded to nearest even; NaN made quiet.
AVTRAIN_HOST_DEVICE inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t x = float_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((x >> 16) | 0x40u);
  return std::uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

AVTRAIN_HOST_DEVICE inline float bf16_to_float(std::uint16_t b) { return bits_float(std::uint32_t(b) << 16); }

// Array conversions (vectorised; host only).
void floats_to_half(const float* in, std::uint16_t* out, std::size_t n);
void half_to_floats(const std::uint16_t* in, float* out, std::size_t n);
void floats_to_bf16(const float* in, std::uint16_t* out, std::size_t n);
void bf16_to_floats(const std::uint16_t* in, float* out, std::size_t n);
// x[i] = the fp32 value of x[i] rounded to fp16 / bf16, in place; when packed is not null the
// 16-bit patterns are written there too (one pass for a value that is both used and kept).
void round_to_half(float* x, std::uint16_t* packed, std::size_t n);
void round_to_bf16(float* x, std::uint16_t* packed, std::size_t n);

}  // namespace avtrain
