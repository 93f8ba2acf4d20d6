#pragma once
// Element functions shared by the separate kernels and the fused passes (cuda_fused_passes.cu): one
// expression, so a fused pass gives the separate kernels' bits.
#include <cstdint>

#include "backend/backend.hpp"
#include "core/dtype.hpp"
#include "core/half.hpp"

namespace avtrain::cuda {

constexpr float kSqrtHalf = 0.70710678118654752f, kInvSqrt2Pi = 0.3989422804014327f;

// The exact (erf) GELU and its derivative.
__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * kSqrtHalf)); }
__device__ __forceinline__ float gelu_grad(float v) {
  const float cdf = 0.5f * (1.0f + erff(v * kSqrtHalf));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
  return cdf + v * pdf;
}

// v rounded to `type` (fp32: as it is), its 16-bit pattern to *bits when bits is not null.
__device__ __forceinline__ float round_in(DType type, float v, std::uint16_t* bits) {
  if (type == DType::f32) return v;
  const std::uint16_t h = type == DType::bf16 ? float_to_bf16(v) : float_to_half(v);
  if (bits) *bits = h;
  return type == DType::bf16 ? bf16_to_float(h) : half_to_float(h);
}

// Element i of an operand: an fp32 value, or a 16-bit pattern widened (exact).
__device__ __forceinline__ float value_at(Operand x, std::size_t i) {
  if (x.dtype == DType::f32) return static_cast<const float*>(x.data)[i];
  const std::uint16_t h = static_cast<const std::uint16_t*>(x.data)[i];
  return x.dtype == DType::bf16 ? bf16_to_float(h) : half_to_float(h);
}

}  // namespace avtrain::cuda
