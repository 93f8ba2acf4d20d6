#pragma once
// The linear layer's products through cuBLASLt with an epilogue, under device.fused: the forward
// product writes its 16-bit output directly with the bias added in fp32 before the one rounding (the
// BIAS epilogue, an fp32 bias vector), and the weight-gradient product writes dW in 16 bits with the
// bias gradient summed on the way (BGRADB). The model's GELU is the exact (erf) one and cuBLASLt's
// GELU epilogues are the tanh approximation, so GELU stays a kernel of ours.
//
// Row-major as the layers see them, column-major as cuBLASLt does (a row-major [r, c] matrix is a
// column-major [c, r] one with the same leading dimension):
//   forward  y[rows, out] = x[rows, in] W[out, in]^T + b:  D[out, rows] = op_T(W)[out, in] x[in, rows],
//            the bias one per row of D (cuBLASLt's BIAS: the length of D's rows count);
//   dW[out, in] = dy[rows, out]^T x[rows, in]:  D[in, out] = x[in, rows] op_T(dy)[rows, out], and db,
//            the sums of dy over rows, are the sums of op(B) over the product's k dimension, one per
//            column of D: BGRADB (BGRADA would sum x).
// Each shape's descriptors, layouts and algorithm (the heuristic's first choice, for the operands'
// actual pointer alignments) are made once and kept. Where cuBLASLt offers no algorithm (a type, an
// fp32 bias with a 16-bit output, an alignment or a leading dimension it does not take), the call
// returns false having written nothing, and the caller takes the separate ops; so too where
// cublasLtMatmul refuses the heuristic's algorithm at its first run (NOT_SUPPORTED, INVALID_VALUE).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "core/dtype.hpp"
#include "cublaslt_plan.hpp"

namespace avtrain::cuda {

class LtMatmul {
 public:
  LtMatmul();
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // The workspace the products may use (device memory, 256-byte aligned; kept by the caller).
  static constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;
  void set_workspace(void* workspace, std::size_t bytes) {
    workspace_ = workspace;
    workspace_bytes_ = bytes;
  }

  // y16[rows, out] = round(x[rows, in] W[out, in]^T + bias) in `type` (fp16 or bf16): the product
  // accumulated in fp32, the fp32 bias (or none: null) added, rounded once. x and W are 16-bit patterns
  // in `type`. False, nothing written, where cuBLASLt has no algorithm for it.
  bool linear_forward(cudaStream_t stream, DType type, const std::uint16_t* x, const std::uint16_t* w,
                      const float* bias, std::uint16_t* y16, int rows, int in, int out);
  // dw16[out, in] = round(dy[rows, out]^T x[rows, in]) and, when db16 is not null,
  // db16[out] = round(sum over rows of dy) (BGRADB), in `type`, accumulated in fp32. False, nothing
  // written, where cuBLASLt has no algorithm for it.
  bool weight_grad(cudaStream_t stream, DType type, const std::uint16_t* dy, const std::uint16_t* x,
                   std::uint16_t* dw16, std::uint16_t* db16, int rows, int in, int out);

  // Products run through cuBLASLt so far, and why the last refused one was refused (for tests and logs);
  // refusals(): how many plans were refused (each is asked of the heuristic once and kept).
  long long products() const { return products_; }
  const std::string& last_refusal() const { return last_refusal_; }
  long long refusals() const { return refusals_; }

 private:
  enum class Kind { forward, weight_grad };
  // The shape, the type, the epilogue and each pointer's alignment (what the algorithm depends on).
  using Key = std::tuple<int, int, int, int, int, bool, int, int, int, int>;
  struct Plan : LtPlan {
    bool found = false;
    bool ran = false;  // cublasLtMatmul has taken it once
  };
  bool run(cudaStream_t stream, Kind kind, DType type, const void* a, const void* b, void* d, void* bias, int m, int n,
           int k);
  Plan make_plan(Kind kind, DType type, const void* a, const void* b, const void* d, void* bias, int m, int n, int k);
  static void release(Plan& plan);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
  long long products_ = 0;
  long long refusals_ = 0;
  std::string last_refusal_;
};

}  // namespace avtrain::cuda
