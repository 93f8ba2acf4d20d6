// Storage conversions between fp32 and fp16/bf16: the vectorised array routines of core/half,
// run over chunks on the threads (chunks.hpp).
#include "backend/cpu/chunks.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace avtrain {

namespace {
// The conversions here are fp16's and bf16's; a storage type without one here is refused, not taken
// for bf16.
void require_sixteen_bits(DType t, const char* op) {
  require(t == DType::f16 || t == DType::bf16, std::string("internal: ") + op + " to or from " + dtype_name(t));
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

void CpuBackend::pack(const float* x, Target packed, std::size_t n) {
  require_sixteen_bits(packed.dtype, "pack");
  auto* bits = static_cast<std::uint16_t*>(packed.data);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    if (packed.dtype == DType::f16) floats_to_half(x + lo, bits + lo, m);
    else floats_to_bf16(x + lo, bits + lo, m);
  });
}

void CpuBackend::unpack(Operand packed, float* x, std::size_t n) {
  require_sixteen_bits(packed.dtype, "unpack");
  const auto* bits = static_cast<const std::uint16_t*>(packed.data);
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    if (packed.dtype == DType::f16) half_to_floats(bits + lo, x + lo, m);
    else bf16_to_floats(bits + lo, x + lo, m);
  });
}

const float* CpuBackend::widened(Operand x, std::size_t n, Buffer& scratch) {
  if (x.dtype == DType::f32) return static_cast<const float*>(x.data);
  scratch.resize(n);
  unpack(x, scratch.data(), n);
  return scratch.data();
}

}  // namespace avtrain
