// Storage conversions between fp32 and fp16/bf16 (the vectorised array routines of core/half) and
// between fp32 and the fp8 formats with their scales (core/fp8), run over chunks on the threads
// (chunks.hpp).
#include <algorithm>
#include <vector>

#include "backend/cpu/chunks.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "core/error.hpp"
#include "core/fp8.hpp"
#include "core/half.hpp"

namespace avtrain {

namespace {
// The conversions here are fp16's and bf16's; a storage type without one here is refused, not taken
// for bf16.
void require_sixteen_bits(DType t, const char* op) {
  require(t == DType::f16 || t == DType::bf16, std::string("internal: ") + op + " to or from " + dtype_name(t));
}

// An fp8 tensor's scale: it must have one.
float fp8_scale(const float* scale, DType t, const char* op) {
  require(scale != nullptr, std::string("internal: ") + op + " of " + dtype_name(t) + " without a scale");
  return *scale;
}
}  // namespace

void CpuBackend::round_to(Output x, std::size_t n) {
  const DType dtype = x.dtype();
  if (dtype == DType::f32) return;
  require_sixteen_bits(dtype, "round_to");
  auto* packed = static_cast<std::uint16_t*>(x.copy.data);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    std::uint16_t* p = packed ? packed + lo : nullptr;
    if (dtype == DType::f16) round_to_half(x.values + lo, p, m);
    else round_to_bf16(x.values + lo, p, m);
  });
}

// fp8: codes[i] = fp8(x[i] * scale) (core/fp8's quantize_fp8: the product rounded to fp32, then to
// nearest even, saturating).
void CpuBackend::pack(const float* x, Target packed, std::size_t n) {
  if (is_fp8(packed.dtype)) {
    const float scale = fp8_scale(packed.scale, packed.dtype, "pack");
    auto* codes = static_cast<std::uint8_t*>(packed.data);
    cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) { quantize_fp8(fp8_format(packed.dtype), x + lo, scale, codes + lo, m); });
    return;
  }
  require_sixteen_bits(packed.dtype, "pack");
  auto* bits = static_cast<std::uint16_t*>(packed.data);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    if (packed.dtype == DType::f16) floats_to_half(x + lo, bits + lo, m);
    else floats_to_bf16(x + lo, bits + lo, m);
  });
}

// x's values (a 16-bit x widened into scratch first) packed chunk by chunk as pack does; with stats,
// each chunk's statistics kept and folded in chunk order (the same numbers on any thread count: the
// counts are integers, the amax and the minimum exact).
void CpuBackend::quantize(Operand x, Target codes, std::size_t n, Fp8CastStats* stats, float* scratch) {
  require(is_fp8(codes.dtype), std::string("internal: quantize to ") + dtype_name(codes.dtype));
  const float* values = static_cast<const float*>(x.data);
  if (x.dtype != DType::f32) {
    require(scratch != nullptr, "internal: quantize of a 16-bit tensor without scratch for its values");
    unpack(x, scratch, n);
    values = scratch;
  }
  if (!stats) {
    pack(values, codes, n);
    return;
  }
  const float scale = fp8_scale(codes.scale, codes.dtype, "quantize");
  auto* out = static_cast<std::uint8_t*>(codes.data);
  std::vector<Fp8CastStats> chunk((n + cpu::kChunk - 1) / cpu::kChunk);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    chunk[lo / cpu::kChunk] = quantize_fp8_counted(fp8_format(codes.dtype), values + lo, scale, out + lo, m);
  });
  for (const Fp8CastStats& c : chunk) stats->fold(c);
}

// fp8: x[i] = value(codes[i]) * (1 / scale), the inverse scale in fp32 as the products take it.
void CpuBackend::unpack(Operand packed, float* x, std::size_t n) {
  if (is_fp8(packed.dtype)) {
    decode_fp8(packed, 1.0f / fp8_scale(packed.scale, packed.dtype, "unpack"), x, n);
    return;
  }
  require_sixteen_bits(packed.dtype, "unpack");
  const auto* bits = static_cast<const std::uint16_t*>(packed.data);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    if (packed.dtype == DType::f16) half_to_floats(bits + lo, x + lo, m);
    else bf16_to_floats(bits + lo, x + lo, m);
  });
}

void CpuBackend::decode_fp8(Operand codes, float factor, float* x, std::size_t n) {
  require(is_fp8(codes.dtype), std::string("internal: decode_fp8 of ") + dtype_name(codes.dtype));
  const auto* in = static_cast<const std::uint8_t*>(codes.data);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) { dequantize_fp8(fp8_format(codes.dtype), in + lo, factor, x + lo, m); });
}

const float* CpuBackend::widened(Operand x, std::size_t n, Buffer& scratch) {
  if (x.dtype == DType::f32) return static_cast<const float*>(x.data);
  scratch.resize(n);
  unpack(x, scratch.data(), n);
  return scratch.data();
}

// fp32 values rounded chunk by chunk as they are copied (one pass, each chunk in cache).
const float* CpuBackend::in_compute(Operand x, DType compute, std::size_t n, Buffer& scratch) {
  if (x.dtype != DType::f32 || compute == DType::f32) return widened(x, n, scratch);
  require_sixteen_bits(compute, "a product's operand rounded");
  scratch.resize(n);
  const auto* in = static_cast<const float*>(x.data);
  float* out = scratch.data();
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    std::copy(in + lo, in + lo + m, out + lo);
    if (compute == DType::f16) round_to_half(out + lo, nullptr, m);
    else round_to_bf16(out + lo, nullptr, m);
  });
  return out;
}

}  // namespace avtrain
