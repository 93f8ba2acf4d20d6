// Matrix products through CBLAS (OpenBLAS).
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "backend/cpu/cpu_backend.hpp"

extern "C" void openblas_set_num_threads(int);

namespace avtrain {

namespace {
CBLAS_TRANSPOSE to_cblas(Trans t) { return t == Trans::yes ? CblasTrans : CblasNoTrans; }
}  // namespace

// OpenBLAS itself always runs one thread: every product is cut here into bands whose shape
// depends only on the product, so results are the same bits whatever the thread count.
void CpuBackend::set_threads(int threads) {
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
}

// C is cut into bands of rows (when M >= N, else columns), about eight of them, multiples of 8
// and at least 64 wide, each a one-thread sgemm, run over the threads. At this code's mid-size
// shapes (3040 x 128 x 128..512) one-thread bands beat OpenBLAS's own two-thread split (one
// block's twelve products: 25.7 vs 27.6 ms, best of 7, same run).
void CpuBackend::gemm(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  const double flops = 2.0 * M * N * K;
  gemm_flops_ += flops;
  const bool by_rows = M >= N;
  const int extent = by_rows ? M : N;
  const int band = std::max(64, ((extent + 7) / 8 + 7) / 8 * 8);
  const int bands = (extent + band - 1) / band;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < bands; ++i) {
    const int lo = i * band, hi = std::min(extent, lo + band);
    if (by_rows) {
      const float* a = ta == Trans::yes ? A + lo : A + std::size_t(lo) * lda;
      cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), hi - lo, N, K, alpha, a, lda, B, ldb, beta,
                  C + std::size_t(lo) * ldc, ldc);
    } else {
      const float* b = tb == Trans::yes ? B + std::size_t(lo) * ldb : B + lo;
      cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo,
                  ldc);
    }
  }
}

}  // namespace avtrain
