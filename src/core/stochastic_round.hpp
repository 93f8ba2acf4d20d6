#pragma once
// Rounding fp32 to bf16 stochastically: add a uniform random integer below 2^16 to the fp32 bit
// pattern, then keep the top 16 bits. A value between two bf16 neighbours goes to the upper one
// with probability (its distance from the lower) / (their distance): unbiased, and only those two
// are ever chosen; a value that is a bf16 already (low 16 bits zero) never moves. NaN stays NaN
// (made quiet, as float_to_bf16 does), ±inf stay, and a finite value past the largest bf16 goes to
// inf of its own sign with that same probability (the carry never reaches the sign bit).
//
// The random bits are counter-based, keyed by (seed, parameter name, update, element index within
// the parameter): no state, so a run repeats bit for bit and any cut of the parameters into ZeRO
// parts or pipeline stages draws the same bits for the same element. Host and device share the code.
#include <cstdint>
#include <string_view>

#include "core/enum_names.hpp"
#include "core/half.hpp"
#include "core/host_device.hpp"
#include "core/keyed_random.hpp"

namespace avtrain {

// precision.weight_rounding: how an update without fp32 masters is written back to the bf16 weights.
enum class Rounding : unsigned char { nearest, stochastic };
constexpr EnumNames<Rounding, 2> enum_names(Rounding) {
  return {{{Rounding::nearest, "nearest"}, {Rounding::stochastic, "stochastic"}}};
}

// The key of a parameter's rounding bits (host only: the name is hashed once, not per element).
inline std::uint64_t rounding_key(std::uint64_t seed, std::string_view parameter) {
  return mix64(seed ^ 0x7374726f756e6421ull) ^ fnv1a(parameter);
}

// The stream of update `step` (AdamW's count, from 1) of a parameter keyed `key`.
AVTRAIN_HOST_DEVICE inline std::uint64_t rounding_stream(std::uint64_t key, std::uint64_t step) {
  return mix64(key ^ mix64(step * 0xd1b54a32d192ed03ull));
}

// 32 random bits for element `element` (its index within the parameter) of a stream.
AVTRAIN_HOST_DEVICE inline std::uint32_t rounding_bits(std::uint64_t stream, std::uint64_t element) {
  return std::uint32_t(mix64(stream + (element + 1) * 0x9e3779b97f4a7c15ull) >> 32);
}

// fp32 -> bf16 bits, rounded up or down by the low 16 bits of `random`.
AVTRAIN_HOST_DEVICE inline std::uint16_t float_to_bf16_stochastic(float value, std::uint32_t random) {
  const std::uint32_t x = float_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((x >> 16) | 0x40u);  // NaN, made quiet
  return std::uint16_t((x + (random & 0xffffu)) >> 16);
}

// Element `element` of a stream's parameter to bf16, as `rounding` says.
AVTRAIN_HOST_DEVICE inline std::uint16_t round_to_bf16(float value, Rounding rounding, std::uint64_t stream,
                                                       std::uint64_t element) {
  return rounding == Rounding::stochastic ? float_to_bf16_stochastic(value, rounding_bits(stream, element))
                                          : float_to_bf16(value);
}

}  // namespace avtrain
