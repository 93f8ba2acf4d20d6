// Matrix products through CBLAS (OpenBLAS).
#include <cblas.h>
#include <omp.h>

#include "backend/cpu/cpu_backend.hpp"

extern "C" void openblas_set_num_threads(int);

namespace avtrain {

namespace {
CBLAS_TRANSPOSE to_cblas(Trans t) { return t == Trans::yes ? CblasTrans : CblasNoTrans; }
}  // namespace

void CpuBackend::set_threads(int threads) {
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
}

void CpuBackend::gemm(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  gemm_flops_ += 2.0 * M * N * K;
  cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace avtrain
