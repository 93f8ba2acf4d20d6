// The CUDA backend's FP8 side (precision.mode fp8, sm_89 and later):
// - pack to e4m3/e5m2 quantizes with the tensor's scale, codes = fp8(x * scale), and unpack gives
//   code * (1 / scale): core/fp8's scalar conversions compiled as device code (rounding to nearest
//   even, saturating, NaN to 0x7F), so the GPU gives the CPU's bits; quantize does what the layers'
//   unpack and counted pack of a bf16 tensor do, in one pass: x read once, its codes written, the
//   cast's statistics (amax, smallest non-zero |x|, underflow and saturation counts) folded in;
// - gemm with fp8 operands is cuBLASLt's FP8 matmul (fp8_matmul.hpp). Row-major C = op(A) op(B) is
//   column-major C^T = op(B)^T op(A)^T, and cuBLASLt's FP8 kernels take both operands with k
//   contiguous (TN), sizes multiples of 16 and 16-byte alignment. So op(B) must be stored [N, K]
//   (tb yes) and op(A) [M, K] (ta no); an operand that is not (the linear's dgrad weight and both
//   wgrad operands), or whose K or leading dimension is off a multiple of 16, is copied first into
//   scratch in that layout, transposed where it must be and padded with zero codes (which add
//   nothing). Rows of C beyond the last multiple of 16 (a batch of 8 x 1049 tokens) go through a
//   second product of 16 rows into scratch, copied into C; where N or C's leading dimension is off,
//   all of C does. cuBLASLt's scales are the factor the CPU's emulation takes,
//   alpha * (1 / scale_a) * (1 / scale_b) in fp32, computed on the device, and 1 (alpha is 1): the
//   sum of the exact code products in fp32 times that factor, as on the CPU, up to the order of the
//   sum.
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/fp8.hpp"
#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "device_query.hpp"
#include "elementwise_math.cuh"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

int round16(int x) { return (x + 15) / 16 * 16; }
bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <Fp8Format F>
__global__ void quantize_kernel(const float* x, const float* scale, std::uint8_t* codes, std::size_t n) {
  const float s = *scale;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i] * s;
    codes[i] = F == Fp8Format::e4m3 ? float_to_e4m3(v) : float_to_e5m2(v);
  }
}

// stats->min_nonzero = the smaller of it and `bits` (|x| as bits), where 0 there means none yet.
__device__ void fold_min_nonzero(std::uint32_t* held, std::uint32_t bits) {
  std::uint32_t old = *held;
  while (old == 0 || bits < old) {
    const std::uint32_t seen = atomicCAS(held, old, bits);
    if (seen == old) return;
    old = seen;
  }
}

// x (fp32 or 16-bit, read as its values) quantized as quantize_kernel does, and where stats is not
// null what the cast did folded in as core/fp8's quantize_fp8_counted and Fp8CastStats::fold count
// it: the amax and the smallest non-zero |x| as the bits of |x| under integer max and min (every NaN
// above +inf: an amax lets it through, a minimum passes it over), the underflow (a non-zero value, a
// zero code) and saturation (|x * scale| above the largest value) counts; each warp's into *stats
// (maxima, minima and integer counts: the order does not matter, the same numbers as the CPU's).
template <Fp8Format F>
__global__ void quantize_operand_kernel(Operand x, const float* scale, std::uint8_t* codes, std::size_t n,
                                        Fp8CastStats* stats) {
  constexpr float kLargest = F == Fp8Format::e4m3 ? kFp8E4M3Max : kFp8E5M2Max;
  constexpr std::uint32_t kInfBits = 0x7f800000u;
  const float s = *scale;
  std::uint32_t largest = 0, smallest = 0xffffffffu;
  unsigned long long underflow = 0, saturated = 0;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = value_at(x, i);
    const std::uint32_t a = __float_as_uint(v) & 0x7fffffffu;
    const float scaled = v * s;
    const std::uint8_t code = F == Fp8Format::e4m3 ? float_to_e4m3(scaled) : float_to_e5m2(scaled);
    codes[i] = code;
    largest = max(largest, a);
    if (a != 0 && a <= kInfBits) smallest = min(smallest, a);
    underflow += (a != 0 && (code & 0x7fu) == 0) ? 1 : 0;
    saturated += fabsf(scaled) > kLargest ? 1 : 0;
  }
  if (!stats) return;
  for (int o = kWarp / 2; o > 0; o /= 2) {
    largest = max(largest, __shfl_xor_sync(0xffffffffu, largest, o));
    smallest = min(smallest, __shfl_xor_sync(0xffffffffu, smallest, o));
    underflow += __shfl_xor_sync(0xffffffffu, underflow, o);
    saturated += __shfl_xor_sync(0xffffffffu, saturated, o);
  }
  if ((threadIdx.x & (kWarp - 1)) != 0) return;
  if (largest) atomicMax(reinterpret_cast<std::uint32_t*>(&stats->amax), largest);
  if (smallest != 0xffffffffu) fold_min_nonzero(reinterpret_cast<std::uint32_t*>(&stats->min_nonzero), smallest);
  if (underflow) atomicAdd(&stats->underflow, double(underflow));
  if (saturated) atomicAdd(&stats->saturated, double(saturated));
}

template <Fp8Format F>
__global__ void dequantize_kernel(const std::uint8_t* codes, const float* scale, float* x, std::size_t n) {
  const float factor = 1.0f / *scale;
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    x[i] = (F == Fp8Format::e4m3 ? e4m3_to_float(codes[i]) : e5m2_to_float(codes[i])) * factor;
}

// factors[0] = alpha * (1 / scale_a) * (1 / scale_b), in that order (the CPU's), factors[1] = 1.
__global__ void product_factor_kernel(const float* scale_a, const float* scale_b, float alpha, float* factors) {
  factors[0] = alpha * (1.0f / *scale_a) * (1.0f / *scale_b);
  factors[1] = 1.0f;
}

// dst[r, c] (dst_rows x dst_cols, row-major, packed) = the operand's element (row0 + r, c), or the code
// 0 beyond its rows x cols; the operand is row-major (rows x cols, leading dimension ld) or, transposed,
// stored cols x rows. Tiles of 32 x 32 bytes through shared memory, so that reads and writes are both
// along rows of their matrices.
constexpr int kTile = 32;
__global__ void k_major_kernel(const std::uint8_t* src, int ld, bool transposed, int row0, int rows, int cols,
                               std::uint8_t* dst, int dst_rows, int dst_cols) {
  __shared__ std::uint8_t tile[kTile][kTile + 1];
  const int r0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  // Load: for a row-major source the tile's rows are operand rows; transposed, they are operand columns.
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int j = threadIdx.x;
    int r, c;
    if (transposed) c = c0 + i, r = r0 + j;
    else r = r0 + i, c = c0 + j;
    const int sr = row0 + r;
    std::uint8_t v = 0;
    if (r < dst_rows && c < dst_cols && sr < rows && c < cols)
      v = transposed ? src[std::size_t(c) * ld + sr] : src[std::size_t(sr) * ld + c];
    if (transposed) tile[j][i] = v;
    else tile[i][j] = v;
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int r = r0 + i, c = c0 + threadIdx.x;
    if (r < dst_rows && c < dst_cols) dst[std::size_t(r) * dst_cols + c] = tile[i][threadIdx.x];
  }
}

// C[r, c] = D[r, c] + beta * C[r, c] for r < rows, c < cols (C not read where beta is 0).
__global__ void take_rows_kernel(const float* d, int ldd, float beta, float* c, int ldc, int rows, int cols) {
  const std::size_t n = std::size_t(rows) * cols;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::size_t r = i / cols, k = i % cols;
    const float v = d[r * ldd + k];
    float* out = c + r * ldc + k;
    *out = beta == 0.0f ? v : v + beta * *out;
  }
}

__global__ void scale_rows_kernel(float* c, int ldc, float beta, int rows, int cols) {
  const std::size_t n = std::size_t(rows) * cols;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    float* out = c + (i / cols) * ldc + i % cols;
    *out = beta == 0.0f ? 0.0f : beta * *out;
  }
}

const float* scale_of(const float* scale, DType t, const char* op) {
  require(scale != nullptr, std::string("internal: ") + op + " of " + dtype_name(t) + " without a scale");
  return scale;
}
}  // namespace

void CudaBackend::pack_fp8(const float* x, Target to, std::size_t n) {
  const float* scale = scale_of(to.scale, to.dtype, "pack");
  auto* codes = static_cast<std::uint8_t*>(to.data);
  if (n == 0) return;
  if (to.dtype == DType::e4m3)
    quantize_kernel<Fp8Format::e4m3><<<blocks_for(n), kThreads, 0, stream_>>>(x, scale, codes, n);
  else
    quantize_kernel<Fp8Format::e5m2><<<blocks_for(n), kThreads, 0, stream_>>>(x, scale, codes, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::quantize(Operand x, Target to, std::size_t n, Fp8CastStats* stats, float*) {
  require(is_fp8(to.dtype), std::string("internal: quantize to ") + dtype_name(to.dtype));
  const float* scale = scale_of(to.scale, to.dtype, "quantize");
  auto* codes = static_cast<std::uint8_t*>(to.data);
  if (n == 0) return;
  if (to.dtype == DType::e4m3)
    quantize_operand_kernel<Fp8Format::e4m3><<<blocks_for(n), kThreads, 0, stream_>>>(x, scale, codes, n, stats);
  else
    quantize_operand_kernel<Fp8Format::e5m2><<<blocks_for(n), kThreads, 0, stream_>>>(x, scale, codes, n, stats);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::unpack_fp8(Operand from, float* x, std::size_t n) {
  const float* scale = scale_of(from.scale, from.dtype, "unpack");
  const auto* codes = static_cast<const std::uint8_t*>(from.data);
  if (n == 0) return;
  if (from.dtype == DType::e4m3)
    dequantize_kernel<Fp8Format::e4m3><<<blocks_for(n), kThreads, 0, stream_>>>(codes, scale, x, n);
  else
    dequantize_kernel<Fp8Format::e5m2><<<blocks_for(n), kThreads, 0, stream_>>>(codes, scale, x, n);
  CUDA_CHECK_LAUNCH();
}

Fp8Matmul& CudaBackend::fp8_matmul() {
  if (compute_capability_ < 89) throw Error(fp8_refusal(options_.device));
  if (!fp8_) {
    fp8_ = std::make_unique<Fp8Matmul>();
    fp8_workspace_ = allocate(Fp8Matmul::kWorkspaceBytes);
    fp8_->set_workspace(fp8_workspace_, Fp8Matmul::kWorkspaceBytes);
  }
  return *fp8_;
}

void CudaBackend::gemm_fp8(Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda, Operand B,
                           int ldb, float beta, float* C, int ldc) {
  require(is_fp8(A.dtype) && is_fp8(B.dtype), "internal: an FP8 product takes fp8 operands alone, in an fp8 compute type");
  require(A.scale != nullptr && B.scale != nullptr, "internal: an FP8 product's operand without a scale");
  require(!(A.dtype == DType::e5m2 && B.dtype == DType::e5m2),
          "internal: an FP8 product of two E5M2 operands (cuBLASLt has none; the linears take E5M2 x E4M3)");
  Fp8Matmul& lt = fp8_matmul();
  gemm_flops_ += 2.0 * M * N * K;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    scale_rows_kernel<<<blocks_for(std::size_t(M) * N), kThreads, 0, stream_>>>(C, ldc, beta, M, N);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int Kp = round16(K), Np = round16(N), Mp = round16(M);
  const auto* a = static_cast<const std::uint8_t*>(A.data);
  const auto* b = static_cast<const std::uint8_t*>(B.data);
  // As cuBLASLt has them: its A is op(B) stored [N, K] (k contiguous), its B is op(A) stored [M, K].
  const bool b_direct = tb == Trans::yes && K == Kp && N == Np && ldb % 16 == 0 && aligned16(b);
  const bool a_direct = ta == Trans::no && K == Kp && lda % 16 == 0 && aligned16(a);
  const bool c_direct = N == Np && ldc % 4 == 0 && aligned16(C);
  // Rows of C the main product writes in place, and the rest through scratch.
  const int main_rows = c_direct ? M / 16 * 16 : 0;
  const int tail_rows = M - main_rows;  // < 16 where C is direct
  const int tail_padded = round16(tail_rows);

  // Scratch: the factors, op(B) where copied, op(A) where copied (all its rows, padded) or its tail, D's tail.
  const std::size_t factor_bytes = aligned(2 * sizeof(float));
  const std::size_t b_bytes = b_direct ? 0 : aligned(std::size_t(Np) * Kp);
  const std::size_t a_rows = a_direct ? std::size_t(tail_rows ? tail_padded : 0) : std::size_t(Mp);
  const std::size_t a_bytes = aligned(a_rows * Kp);
  const std::size_t d_bytes = tail_rows ? aligned(std::size_t(tail_padded) * Np * sizeof(float)) : 0;
  char* base = static_cast<char*>(scratch(factor_bytes + b_bytes + a_bytes + d_bytes));
  auto* factors = reinterpret_cast<float*>(base);
  auto* b_copy = reinterpret_cast<std::uint8_t*>(base + factor_bytes);
  auto* a_copy = reinterpret_cast<std::uint8_t*>(base + factor_bytes + b_bytes);
  auto* d_tail = reinterpret_cast<float*>(base + factor_bytes + b_bytes + a_bytes);

  product_factor_kernel<<<1, 1, 0, stream_>>>(A.scale, B.scale, alpha, factors);
  CUDA_CHECK_LAUNCH();
  const dim3 tile_threads(kTile, 8);
  auto k_major = [&](const std::uint8_t* src, int ld, bool transposed, int row0, int rows, std::uint8_t* dst,
                     int dst_rows) {
    const dim3 grid(unsigned((Kp + kTile - 1) / kTile), unsigned((dst_rows + kTile - 1) / kTile));
    require(grid.y <= 65535u, "internal: an FP8 operand of " + std::to_string(dst_rows) + " rows (at most " +
                                  std::to_string(65535 * kTile) + " in one copy)");
    k_major_kernel<<<grid, tile_threads, 0, stream_>>>(src, ld, transposed, row0, rows, K, dst, dst_rows, Kp);
    CUDA_CHECK_LAUNCH();
  };
  const std::uint8_t* lt_a = b;
  int lt_lda = ldb;
  if (!b_direct) {
    k_major(b, ldb, tb == Trans::no, 0, N, b_copy, Np);
    lt_a = b_copy;
    lt_lda = Kp;
  }
  if (!a_direct) k_major(a, lda, ta == Trans::yes, 0, M, a_copy, Mp);
  else if (tail_rows) k_major(a, lda, false, main_rows, M, a_copy, tail_padded);

  if (main_rows)
    lt.run(stream_, B.dtype, lt_a, lt_lda, A.dtype, a_direct ? a : a_copy, a_direct ? lda : Kp, factors, factors + 1,
           beta, C, ldc, Np, main_rows, Kp);
  if (tail_rows) {
    // The tail's op(A) rows: the copy's rows from main_rows on (all of them where nothing went in place).
    const std::uint8_t* tail_a = a_direct ? a_copy : a_copy + std::size_t(main_rows) * Kp;
    lt.run(stream_, B.dtype, lt_a, lt_lda, A.dtype, tail_a, Kp, factors, factors + 1, 0.0f, d_tail, Np, Np,
           tail_padded, Kp);
    take_rows_kernel<<<blocks_for(std::size_t(tail_rows) * N), kThreads, 0, stream_>>>(
        d_tail, Np, beta, C + std::size_t(main_rows) * ldc, ldc, tail_rows, N);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace avtrain::cuda
