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

void CpuBackend::gemm_batched(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A,
                              int lda, const float* B, int ldb, float beta, float* C, int ldc,
                              const GemmBatch& batch) {
  gemm_flops_ += 2.0 * M * N * K * batch.count;
  // Many small products: one per thread at a time (OpenBLAS runs single-threaded inside an
  // OpenMP region) instead of every thread meeting at each small product.
#pragma omp parallel for schedule(static) if (batch.count > 1)
  for (int i = 0; i < batch.count; ++i) {
    cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), M, N, K, alpha, A + i * batch.stride_a, lda,
                B + i * batch.stride_b, ldb, beta, C + i * batch.stride_c, ldc);
  }
}

}  // namespace avtrain
