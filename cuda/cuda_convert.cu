// Storage conversions between fp32 and fp16/bf16, elementwise with the scalar conversions of
// core/half.hpp: the same code as the CPU's, so a GPU gives the same bits.
#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {
struct Half {
  __device__ static std::uint16_t narrow(float x) { return float_to_half(x); }
  __device__ static float widen(std::uint16_t h) { return half_to_float(h); }
};
struct BFloat16 {
  __device__ static std::uint16_t narrow(float x) { return float_to_bf16(x); }
  __device__ static float widen(std::uint16_t b) { return bf16_to_float(b); }
};

template <typename Format>
__global__ void round_kernel(float* x, std::uint16_t* packed, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::uint16_t bits = Format::narrow(x[i]);
    if (packed) packed[i] = bits;
    x[i] = Format::widen(bits);
  }
}

template <typename Format>
__global__ void pack_kernel(const float* x, std::uint16_t* packed, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    packed[i] = Format::narrow(x[i]);
}

template <typename Format>
__global__ void unpack_kernel(const std::uint16_t* packed, float* x, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    x[i] = Format::widen(packed[i]);
}
// The conversions here are fp16's and bf16's; a storage type without one here is refused, not taken
// for bf16.
void require_sixteen_bits(DType t, const char* op) {
  require(t == DType::f16 || t == DType::bf16, std::string("internal: ") + op + " to or from " + dtype_name(t));
}
}  // namespace

void CudaBackend::round_to(Output out, std::size_t n) {
  const DType dtype = out.dtype();
  if (dtype == DType::f32 || n == 0) return;
  require_sixteen_bits(dtype, "round_to");
  float* x = out.values;
  auto* packed = static_cast<std::uint16_t*>(out.copy.data);
  if (dtype == DType::f16) round_kernel<Half><<<blocks_for(n), kThreads, 0, stream_>>>(x, packed, n);
  else round_kernel<BFloat16><<<blocks_for(n), kThreads, 0, stream_>>>(x, packed, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::pack(const float* x, Target to, std::size_t n) {
  const DType dtype = to.dtype;
  require_sixteen_bits(dtype, "pack");
  auto* packed = static_cast<std::uint16_t*>(to.data);
  if (n == 0) return;
  if (dtype == DType::f16) pack_kernel<Half><<<blocks_for(n), kThreads, 0, stream_>>>(x, packed, n);
  else pack_kernel<BFloat16><<<blocks_for(n), kThreads, 0, stream_>>>(x, packed, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::unpack(Operand from, float* x, std::size_t n) {
  const DType dtype = from.dtype;
  require_sixteen_bits(dtype, "unpack");
  const auto* packed = static_cast<const std::uint16_t*>(from.data);
  if (n == 0) return;
  if (dtype == DType::f16) unpack_kernel<Half><<<blocks_for(n), kThreads, 0, stream_>>>(packed, x, n);
  else unpack_kernel<BFloat16><<<blocks_for(n), kThreads, 0, stream_>>>(packed, x, n);
  CUDA_CHECK_LAUNCH();
}

// FP8 on CUDA is not built (precision.mode fp8 is refused at startup): pack refuses fp8 targets, and
// so does its counting form, in one line rather than a silent wrong result.
void CudaBackend::pack_fp8_counted(const float*, Target to, std::size_t, Fp8CastStats*) {
  throw Error(std::string("precision.mode fp8 on CUDA: not built yet (pack_fp8_counted to ") + dtype_name(to.dtype) +
              "; the CPU emulates it: device.backend cpu)");
}

}  // namespace avtrain::cuda
