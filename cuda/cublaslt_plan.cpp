// cublaslt_plan.hpp: the pieces LtMatmul and Fp8Matmul share.
#include "cublaslt_plan.hpp"

#include <algorithm>

namespace avtrain::cuda {

void release(LtPlan& plan) {
  if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.d) cublasLtMatrixLayoutDestroy(plan.d);
  if (plan.desc) cublasLtMatmulDescDestroy(plan.desc);
  plan = LtPlan{};
}

int alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address == 0) return 256;
  return int(std::min<std::uintptr_t>(address & (~address + 1), 256));
}

LtChoice choose_algorithm(cublasLtHandle_t handle, LtPlan& plan, std::uint64_t workspace, const void* a,
                          const void* b, const void* d) {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LtChoice choice;
  try {
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                      sizeof workspace));
    const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const std::uint32_t bytes[] = {std::uint32_t(alignment(a)), std::uint32_t(alignment(b)),
                                   std::uint32_t(alignment(d)), std::uint32_t(alignment(d))};
    for (int i = 0; i < 4; ++i)
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &bytes[i], sizeof bytes[i]));
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    choice.status =
        cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.d, plan.d, pref, 1, &result, &count);
    choice.found = choice.status == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (choice.found) plan.algo = result.algo;
  } catch (...) {
    cublasLtMatmulPreferenceDestroy(pref);
    throw;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  return choice;
}

}  // namespace avtrain::cuda
