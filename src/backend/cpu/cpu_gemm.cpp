// Matrix products: fp32 through CBLAS (OpenBLAS); bf16 through oneDNN where the CPU has bf16
// matrix units; every other 16-bit product widened to fp32 for CBLAS; FP8 products emulated: the
// codes decoded exactly to fp32 for CBLAS.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/onednn_gemm.hpp"
#include "core/error.hpp"

extern "C" void openblas_set_num_threads(int);

namespace avtrain {

namespace {
// An operand a product converts to its compute type: fp32 (rounded to a 16-bit compute type), the
// compute type itself, or fp16/bf16 in an fp32 product (widened).
void require_product_operand(DType compute, DType operand, const char* which) {
  const bool sixteen = operand == DType::f16 || operand == DType::bf16;
  require(operand == DType::f32 || operand == compute || (compute == DType::f32 && sixteen),
          std::string("internal: gemm operand ") + which + " in " + dtype_name(operand) + " for a product in " +
              dtype_name(compute));
}

CBLAS_TRANSPOSE to_cblas(Trans t) { return t == Trans::yes ? CblasTrans : CblasNoTrans; }

// Elements spanned by a row-major operand of `rows` x `cols` (as used) with leading dimension ld.
std::size_t extent(Trans t, int rows, int cols, int ld) {
  if (t == Trans::yes) std::swap(rows, cols);
  return rows == 0 ? 0 : std::size_t(rows - 1) * ld + cols;
}

// C is cut into bands of rows (when M >= N, else columns), about eight of them, multiples of 8
// and at least 64 wide, each a one-thread product, run over the threads. The bands depend only on
// the product's shape, so results are the same bits whatever the thread count. At this code's
// mid-size shapes (3040 x 128 x 128..512) one-thread bands beat OpenBLAS's own two-thread split
// (one block's twelve products: 25.7 vs 27.6 ms, best of 7, same run).
// product(m, n, a, b, c) computes the band C'[m, n] from the band's operands. Bands of rows also run
// before(lo, hi) and after(lo, hi) on C's rows [lo, hi) on the band's thread, just before and after its
// product, while those rows are in that core's cache (the fused passes: cpu_fused.cpp).
template <typename T, typename Product>
void in_bands(Trans ta, Trans tb, int M, int N, const T* A, int lda, const T* B, int ldb, float* C, int ldc,
              Product product, const CpuBackend::RowBandStep& before, const CpuBackend::RowBandStep& after) {
  const bool by_rows = CpuBackend::bands_rows(M, N);
  const int extent = by_rows ? M : N;
  const int band = std::max(64, ((extent + 7) / 8 + 7) / 8 * 8);
  const int bands = (extent + band - 1) / band;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < bands; ++i) {
    const int lo = i * band, hi = std::min(extent, lo + band);
    if (by_rows) {
      if (before) before(lo, hi);
      const T* a = ta == Trans::yes ? A + lo : A + std::size_t(lo) * lda;
      product(hi - lo, N, a, B, C + std::size_t(lo) * ldc);
      if (after) after(lo, hi);
    } else {
      const T* b = tb == Trans::yes ? B + std::size_t(lo) * ldb : B + lo;
      product(M, hi - lo, A, b, C + lo);
    }
  }
}
}  // namespace

// OpenBLAS itself always runs one thread; the bands above are spread over the threads.
void CpuBackend::set_threads(int threads) {
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
}

// 16-bit products: on oneDNN when it runs bf16 on matrix units (AVX512-BF16, AMX); otherwise the
// operands are widened to fp32 (exactly) and multiplied by sgemm, which accumulates in fp32: the
// same numbers, up to the order of the sums. Either way an fp32 operand is first rounded to the
// compute type (oneDNN: packed to bf16; sgemm: rounded into scratch), and a 16-bit operand of an fp32
// product is widened (Backend::gemm: each operand taken in the compute type).
void CpuBackend::gemm(DType compute, Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda,
                      Operand B, int ldb, float beta, float* C, int ldc) {
  gemm_in_bands(compute, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, {}, {});
}

bool CpuBackend::bands_rows(int M, int N) { return M >= N; }

void CpuBackend::gemm_in_bands(DType compute, Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A,
                               int lda, Operand B, int ldb, float beta, float* C, int ldc, const RowBandStep& before,
                               const RowBandStep& after) {
  require(!(before || after) || bands_rows(M, N), "internal: row-band steps on a product banded by columns");
  if (is_fp8(compute) || is_fp8(A.dtype) || is_fp8(B.dtype)) {
    require(is_fp8(compute) && is_fp8(A.dtype) && is_fp8(B.dtype),
            "internal: an FP8 product takes fp8 operands alone, in an fp8 compute type");
    gemm_fp8(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, before, after);
    return;
  }
  require_product_operand(compute, A.dtype, "A");
  require_product_operand(compute, B.dtype, "B");
  gemm_flops_ += 2.0 * M * N * K;
  const std::size_t na = extent(ta, M, K, lda), nb = extent(tb, K, N, ldb);
  if (compute == DType::bf16 && cpu::onednn_bf16_enabled()) {
    auto narrow = [&](Operand op, std::size_t n, Buffer16& scratch) -> const std::uint16_t* {
      if (op.dtype == DType::bf16) return static_cast<const std::uint16_t*>(op.data);
      scratch.resize(n);
      pack(static_cast<const float*>(op.data), {scratch.data(), DType::bf16}, n);  // rounded to nearest even
      return scratch.data();
    };
    const std::uint16_t* a = narrow(A, na, packed_a_);
    const std::uint16_t* b = narrow(B, nb, packed_b_);
    in_bands(ta, tb, M, N, a, lda, b, ldb, C, ldc,
             [&](int m, int n, const std::uint16_t* a_band, const std::uint16_t* b_band, float* c_band) {
               cpu::onednn_gemm_bf16(ta, tb, m, n, K, alpha, a_band, lda, b_band, ldb, beta, c_band, ldc);
             }, before, after);
    return;
  }
  const float* a = in_compute(A, compute, na, operand_a_);
  const float* b = in_compute(B, compute, nb, operand_b_);
  in_bands(ta, tb, M, N, a, lda, b, ldb, C, ldc, [&](int m, int n, const float* a_band, const float* b_band, float* c_band) {
    cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), m, n, K, alpha, a_band, lda, b_band, ldb, beta, c_band, ldc);
  }, before, after);
}

// The emulation of an FP8 product (precision/fp8_gemm_reference's numbers, summed in sgemm's order):
// each code's value is exact in fp32 and the product of two is too (at most 8 significant bits), so
// the only roundings are fp32 accumulation's and the final alpha * (1 / scale_a) * (1 / scale_b).
// The bands make the bits independent of the thread count.
void CpuBackend::gemm_fp8(Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda, Operand B,
                          int ldb, float beta, float* C, int ldc, const RowBandStep& before,
                          const RowBandStep& after) {
  require(A.scale != nullptr && B.scale != nullptr, "internal: an FP8 product's operand without a scale");
  gemm_flops_ += 2.0 * M * N * K;
  const std::size_t na = extent(ta, M, K, lda), nb = extent(tb, K, N, ldb);
  operand_a_.resize(na);
  operand_b_.resize(nb);
  decode_fp8(A, 1.0f, operand_a_.data(), na);
  decode_fp8(B, 1.0f, operand_b_.data(), nb);
  const float factor = alpha * (1.0f / *A.scale) * (1.0f / *B.scale);
  in_bands(ta, tb, M, N, operand_a_.data(), lda, operand_b_.data(), ldb, C, ldc,
           [&](int m, int n, const float* a_band, const float* b_band, float* c_band) {
             cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), m, n, K, factor, a_band, lda, b_band, ldb, beta,
                         c_band, ldc);
           }, before, after);
}

std::string CpuBackend::gemm_engine(DType compute) const {
  if (is_fp8(compute)) return "fp8 operands decoded exactly to fp32, OpenBLAS sgemm (FP8 emulated)";
  if (compute == DType::f32) return "OpenBLAS sgemm";
  if (compute == DType::bf16 && cpu::onednn_bf16_enabled()) return "oneDNN bf16 matmul, fp32 accumulation";
  return std::string(dtype_name(compute)) + " operands widened to fp32, OpenBLAS sgemm (" + cpu::onednn_description() +
         ")";
}

}  // namespace avtrain
