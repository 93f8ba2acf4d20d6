// cuBLASLt's FP8 matmul (fp8_matmul.hpp): a plan per shape, run on the caller's stream with the
// workspace it gave.
#include "fp8_matmul.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "cublaslt_plan.hpp"
#include "cuda_check.hpp"

namespace avtrain::cuda {

namespace {
cudaDataType_t fp8_type(DType t) { return t == DType::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

std::string shape(DType a_type, DType b_type, int m, int n, int k, int lda, int ldb, int ldd) {
  return std::string(dtype_name(a_type)) + " x " + dtype_name(b_type) + ", m " + std::to_string(m) + " n " +
         std::to_string(n) + " k " + std::to_string(k) + " (lda " + std::to_string(lda) + ", ldb " +
         std::to_string(ldb) + ", ldd " + std::to_string(ldd) + ")";
}
}  // namespace

Fp8Matmul::Fp8Matmul() { CUBLAS_CHECK(cublasLtCreate(&handle_)); }

Fp8Matmul::~Fp8Matmul() {
  for (auto& [key, plan] : plans_) release(plan);
  if (handle_) cublasLtDestroy(handle_);
}

Fp8Matmul::Plan Fp8Matmul::make_plan(DType a_type, const void* a, int lda, DType b_type, const void* b, int ldb,
                                     const void* d, int ldd, int m, int n, int k) {
  Plan plan;
  try {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    // Fast accumulation (no periodic promotion of the partial sums to fp32 on sm_90) stays off: the
    // products are held to the CPU's emulation, which sums in fp32.
    set(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, std::int8_t(0));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, fp8_type(a_type), k, m, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, fp8_type(b_type), k, n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_32F, m, n, ldd));

    const LtChoice choice = choose_algorithm(handle_, plan, workspace_bytes_, a, b, d);
    if (!choice.found)
      throw Error("cuBLASLt has no FP8 product for " + shape(a_type, b_type, m, n, k, lda, ldb, ldd) + ": " +
                  (choice.status != CUBLAS_STATUS_SUCCESS ? cublasGetStatusName(choice.status) : "no algorithm") +
                  " (precision.mode fp8 needs sm_89 or later; precision.mode bf16 runs without it)");
    return plan;
  } catch (...) {
    release(plan);
    throw;
  }
}

void Fp8Matmul::run(cudaStream_t stream, DType a_type, const std::uint8_t* a, int lda, DType b_type,
                    const std::uint8_t* b, int ldb, const float* scale_a, const float* scale_b, float beta, float* d,
                    int ldd, int m, int n, int k) {
  require(is_fp8(a_type) && is_fp8(b_type) && !(a_type == DType::e5m2 && b_type == DType::e5m2),
          "internal: cuBLASLt's FP8 product of " + shape(a_type, b_type, m, n, k, lda, ldb, ldd));
  require(m % 16 == 0 && n % 16 == 0 && k % 16 == 0 && lda % 16 == 0 && ldb % 16 == 0 && ldd % 4 == 0 &&
              lda >= k && ldb >= k && ldd >= m && alignment(a) >= 16 && alignment(b) >= 16 && alignment(d) >= 16,
          "internal: an FP8 product cuBLASLt does not take: " + shape(a_type, b_type, m, n, k, lda, ldb, ldd));
  if (m == 0 || n == 0) return;
  const Key key{int(a_type), int(b_type), m, n, k, lda, ldb, ldd, alignment(a), alignment(b), alignment(d)};
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, make_plan(a_type, a, lda, b_type, b, ldb, d, ldd, m, n, k)).first;
  Plan& plan = it->second;
  set(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(scale_a));
  set(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(scale_b));
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d, plan.d, d, plan.d,
                              &plan.algo, workspace_, workspace_bytes_, stream));
  ++products_;
}

}  // namespace avtrain::cuda
