#pragma once
// The FP8 product through cuBLASLt's FP8 matmul (cublasLtMatmul on E4M3/E5M2 operands, sm_89 and
// later), in cuBLASLt's own terms: column-major, the "TN" layout its FP8 kernels take,
//   D[m, n] = scale_a * scale_b * sum_k A[k, m] B[k, n] + beta * D,
// A stored k x m and B k x n, each with k contiguous (leading dimension >= k), fp32 accumulation and
// scale type (CUBLAS_COMPUTE_32F, CUDA_R_32F), D in fp32 (C is D). The scales are device pointers
// (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER / B_SCALE_POINTER: the factors that take the codes back to
// values), alpha is 1. What cuBLASLt requires of FP8 operands, the caller has done: m, n, k and the
// leading dimensions multiples of 16, the pointers 16-byte aligned, not both operands E5M2. Each shape's
// descriptors, layouts and algorithm (the heuristic's first choice for the pointers' alignments) are
// made once and kept; a shape cuBLASLt has no algorithm for throws avtrain::Error naming it.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "core/dtype.hpp"
#include "cublaslt_plan.hpp"

namespace avtrain::cuda {

class Fp8Matmul {
 public:
  Fp8Matmul();
  ~Fp8Matmul();
  Fp8Matmul(const Fp8Matmul&) = delete;
  Fp8Matmul& operator=(const Fp8Matmul&) = delete;

  static constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;
  void set_workspace(void* workspace, std::size_t bytes) {
    workspace_ = workspace;
    workspace_bytes_ = bytes;
  }

  // As above: a (a_type) with leading dimension lda, b (b_type) with ldb, d with ldd; scale_a and
  // scale_b one float each in device memory, read when the product runs.
  void run(cudaStream_t stream, DType a_type, const std::uint8_t* a, int lda, DType b_type, const std::uint8_t* b,
           int ldb, const float* scale_a, const float* scale_b, float beta, float* d, int ldd, int m, int n, int k);

  long long products() const { return products_; }

 private:
  // Types, shape, leading dimensions and the pointers' alignments (what the algorithm depends on).
  using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, int>;
  using Plan = LtPlan;
  Plan make_plan(DType a_type, const void* a, int lda, DType b_type, const void* b, int ldb, const void* d, int ldd,
                 int m, int n, int k);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
  long long products_ = 0;
};

}  // namespace avtrain::cuda
