#pragma once
// What cuBLASLt's two users here share (LtMatmul: the 16-bit linears with epilogues; Fp8Matmul: the
// FP8 products): a plan's handles and their release, a description's attribute, a pointer's
// alignment, and the heuristic's choice of one algorithm.
#include <cublasLt.h>

#include <cstdint>

#include "cuda_check.hpp"

namespace avtrain::cuda {

// A matmul description, its layouts (C is D) and the algorithm chosen for them.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};
// Destroys the handles it holds and leaves it empty.
void release(LtPlan& plan);

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

// The largest power of two (at most 256) the address is a multiple of; null counts as 256.
int alignment(const void* p);

// The heuristic asked for one algorithm for plan's description and layouts, within `workspace` bytes
// and the alignments of the pointers a, b and d (d also C's): its status, and where it found one, the
// algorithm in plan.algo and true.
struct LtChoice {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  bool found = false;
};
LtChoice choose_algorithm(cublasLtHandle_t handle, LtPlan& plan, std::uint64_t workspace, const void* a,
                          const void* b, const void* d);

}  // namespace avtrain::cuda
