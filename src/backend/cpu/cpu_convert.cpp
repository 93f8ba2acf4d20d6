// Storage conversions between fp32 and fp16/bf16: the vectorised array routines of core/half,
// run over chunks on the threads (chunks.hpp).
#include "backend/cpu/chunks.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace avtrain {

void CpuBackend::round_to(DType dtype, float* x, std::uint16_t* packed, std::size_t n) {
  if (dtype == DType::f32) return;
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    std::uint16_t* p = packed ? packed + lo : nullptr;
    if (dtype == DType::f16) round_to_half(x + lo, p, m);
    else round_to_bf16(x + lo, p, m);
  });
}

void CpuBackend::pack(DType dtype, const float* x, std::uint16_t* packed, std::size_t n) {
  require(dtype != DType::f32, "internal: pack to fp32");
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    if (dtype == DType::f16) floats_to_half(x + lo, packed + lo, m);
    else floats_to_bf16(x + lo, packed + lo, m);
  });
}

void CpuBackend::unpack(DType dtype, const std::uint16_t* packed, float* x, std::size_t n) {
  require(dtype != DType::f32, "internal: unpack from fp32");
  cpu::over_chunks(n, [&](std::size_t lo, std::size_t m) {
    if (dtype == DType::f16) half_to_floats(packed + lo, x + lo, m);
    else bf16_to_floats(packed + lo, x + lo, m);
  });
}

const float* CpuBackend::widened(Operand x, std::size_t n, Buffer& scratch) {
  if (x.dtype == DType::f32) return static_cast<const float*>(x.data);
  scratch.resize(n);
  unpack(x.dtype, static_cast<const std::uint16_t*>(x.data), scratch.data(), n);
  return scratch.data();
}

}  // namespace avtrain
