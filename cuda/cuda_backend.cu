// The CUDA backend's device, stream, cuBLAS handle and memory, and its matrix products.
#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "cuda_input_upload.hpp"
#include "cudnn_attention.hpp"

namespace avtrain::cuda {

namespace {
constexpr std::size_t kAlignment = 256;

std::size_t round_up(std::size_t bytes, std::size_t to) { return (std::max<std::size_t>(bytes, 1) + to - 1) / to * to; }

// Elements spanned by a row-major operand of `rows` x `cols` (as used) with leading dimension ld.
std::size_t extent(Trans t, int rows, int cols, int ld) {
  if (t == Trans::yes) std::swap(rows, cols);
  return rows == 0 ? 0 : std::size_t(rows - 1) * ld + cols;
}

cublasOperation_t to_cublas(Trans t) { return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N; }

cudaDataType_t cuda_type(DType t) {
  return t == DType::f32 ? CUDA_R_32F : t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}
}  // namespace

CudaBackend::CudaBackend(const CudaOptions& options) : options_(options) {
  try {
    CUDA_CHECK(cudaSetDevice(options_.device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    CUBLAS_CHECK(cublasSetMathMode(cublas_, options_.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    int major = 0, minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, options_.device));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, options_.device));
    compute_capability_ = 10 * major + minor;
    fused_attention_capable_ = major >= 8;
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, options_.device));
    shared_optin_bytes_ = std::size_t(optin);
    if (options_.fused && options_.attention != FusedAttentionEngine::own) {
      if (!fused_attention_capable_) cudnn_problem_ = "the GPU is older than sm_80";
      else cudnn_ = CudnnAttention::open(stream_, cudnn_problem_);
      if (!cudnn_ && options_.attention == FusedAttentionEngine::cudnn)
        throw Error("--device.attention cudnn: " + cudnn_problem_);
    }
    if (options_.fused && fused_attention_capable_) lt_ = std::make_unique<LtMatmul>();
    host_result(std::size_t(1) << 20);
  } catch (...) {
    // A throwing constructor runs no destructor: release what was made so far.
    lt_.reset();
    if (host_result_) cudaFreeHost(host_result_);
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  cudnn_.reset();
  if (scratch_) deallocate(scratch_);
  if (stats_plan_) deallocate(stats_plan_);
  if (lt_workspace_) deallocate(lt_workspace_);
  lt_.reset();
  if (fp8_workspace_) deallocate(fp8_workspace_);
  fp8_.reset();
  arena_.reset();
  if (host_result_) cudaFreeHost(host_result_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options) { return std::make_unique<CudaBackend>(options); }

std::unique_ptr<Backend::InputUpload> CudaBackend::make_input_upload() { return cuda::make_input_upload(stream_); }

void* CudaBackend::DeviceMemory::allocate(std::size_t bytes) {
  const std::size_t rounded = round_up(bytes, kAlignment);
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, rounded));
  ++backend_.device_allocations_;
  try {
    CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, backend_.stream_));
    CUDA_CHECK(cudaStreamSynchronize(backend_.stream_));
  } catch (...) {
    cudaFree(p);
    throw;
  }
  return p;
}

void CudaBackend::DeviceMemory::deallocate(void* p) noexcept {
  if (p) cudaFree(p);
}

void* CudaBackend::allocate(std::size_t bytes) {
  return arena_ ? arena_->allocate(bytes) : device_memory_.allocate(bytes);
}

void CudaBackend::deallocate(void* p) noexcept {
  if (arena_ && arena_->contains(p))
    arena_->deallocate(p);
  else
    device_memory_.deallocate(p);
}

void CudaBackend::reserve_arena(std::size_t bytes, const std::string& what) {
  require(!arena_, "internal: the CUDA backend's arena is reserved twice");
  arena_ = std::make_unique<ArenaMemory>(device_memory_, bytes, what);
}

void CudaBackend::upload(void* dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::download(void* host_dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::zero(void* p, std::size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

std::size_t CudaBackend::memory_for_tensors() const {
  if (arena_) return arena_->capacity();
  std::size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

namespace {
// Grows a buffer that ops issued earlier may still read: waits for them before releasing it.
template <class Allocate, class Release>
void* grow(cudaStream_t stream, void*& p, std::size_t& size, std::size_t bytes, Allocate allocate, Release release) {
  if (bytes <= size && p) return p;
  if (p) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(release(p));
    p = nullptr;
    size = 0;
  }
  const std::size_t grown = round_up(bytes, kAlignment);
  CUDA_CHECK(allocate(&p, grown));
  size = grown;
  return p;
}
}  // namespace

void* CudaBackend::scratch(std::size_t bytes) {
  return grow(
      stream_, scratch_, scratch_bytes_, bytes,
      [this](void** q, std::size_t n) {
        *q = allocate(n);
        return cudaSuccess;
      },
      [this](void* q) {
        deallocate(q);
        return cudaSuccess;
      });
}

void* CudaBackend::host_result(std::size_t bytes) {
  return grow(stream_, host_result_, host_result_bytes_, bytes,
              [](void** q, std::size_t n) { return cudaMallocHost(q, n); }, [](void* q) { return cudaFreeHost(q); });
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first, N and M
// swapped and the same transposes, on the same buffers and leading dimensions. An operand not stored
// in the compute type is converted into scratch first: fp32 packed (rounded to nearest even) for a
// 16-bit product, fp16/bf16 unpacked (exact) for an fp32 one (Backend::gemm).
void CudaBackend::gemm(DType compute, Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda,
                       Operand B, int ldb, float beta, float* C, int ldc) {
  if (is_fp8(compute) || is_fp8(A.dtype) || is_fp8(B.dtype)) {
    require(is_fp8(compute), "internal: fp8 operands in a product of " + std::string(dtype_name(compute)));
    return gemm_fp8(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  const auto takes = [compute](DType t) {
    return t == DType::f32 || t == compute || (compute == DType::f32 && (t == DType::f16 || t == DType::bf16));
  };
  require(takes(A.dtype), std::string("internal: gemm operand A in ") + dtype_name(A.dtype) + " for a product in " +
                              dtype_name(compute));
  require(takes(B.dtype), std::string("internal: gemm operand B in ") + dtype_name(B.dtype) + " for a product in " +
                              dtype_name(compute));
  gemm_flops_ += 2.0 * M * N * K;
  if (M == 0 || N == 0) return;

  const bool convert_a = A.dtype != compute, convert_b = B.dtype != compute;
  const std::size_t na = extent(ta, M, K, lda), nb = extent(tb, K, N, ldb), size = dtype_size(compute);
  const std::size_t a_bytes = convert_a ? round_up(na * size, kAlignment) : 0, b_bytes = convert_b ? nb * size : 0;
  if (convert_a || convert_b) {
    auto* converted = static_cast<char*>(scratch(a_bytes + b_bytes));
    const auto convert = [&](Operand& x, void* to, std::size_t n) {
      if (compute == DType::f32) unpack(x, static_cast<float*>(to), n);
      else pack(static_cast<const float*>(x.data), {to, compute}, n);
      x = {to, compute};
    };
    if (convert_a) convert(A, converted, na);
    if (convert_b) convert(B, converted + a_bytes, nb);
  }

  const cudaDataType_t type = cuda_type(compute);
  const cublasComputeType_t accumulate =
      compute == DType::f32 && options_.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // A leading dimension of 0 only comes with an empty operand; cuBLAS still wants it >= 1.
  CUBLAS_CHECK(cublasGemmEx(cublas_, to_cublas(tb), to_cublas(ta), N, M, K, &alpha, B.data, type, std::max(ldb, 1),
                            A.data, type, std::max(lda, 1), &beta, C, CUDA_R_32F, ldc, accumulate,
                            CUBLAS_GEMM_DEFAULT));
}

std::string CudaBackend::gemm_engine(DType compute) const {
  if (is_fp8(compute)) return "cuBLASLt FP8 matmul (E4M3 x E4M3, E5M2 x E4M3; fp32 accumulation)";
  if (compute == DType::f32)
    return options_.allow_tf32 ? "cuBLAS fp32 (TF32 tensor cores, fp32 accumulation)" : "cuBLAS fp32 (TF32 off)";
  const std::string engine = std::string("cuBLAS (") + dtype_name(compute) + " tensor cores, fp32 accumulation)";
  return writes_copies_alone(compute) ? engine + "; linears through cuBLASLt epilogues" : engine;
}

}  // namespace avtrain::cuda
