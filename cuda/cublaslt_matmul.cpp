// cuBLASLt products with epilogues (cublaslt_matmul.hpp): plans made once per shape, run on the
// caller's stream with the workspace it gave.
#include "cublaslt_matmul.hpp"

#include <algorithm>

#include "cublaslt_plan.hpp"
#include "cuda_check.hpp"

namespace avtrain::cuda {

namespace {
cudaDataType_t cuda_type(DType t) { return t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF; }

}  // namespace

LtMatmul::LtMatmul() { CUBLAS_CHECK(cublasLtCreate(&handle_)); }

LtMatmul::~LtMatmul() {
  for (auto& [key, plan] : plans_) release(plan);
  if (handle_) cublasLtDestroy(handle_);
}

void LtMatmul::release(Plan& plan) {
  cuda::release(plan);
  plan = Plan{};
}

bool LtMatmul::linear_forward(cudaStream_t stream, DType type, const std::uint16_t* x, const std::uint16_t* w,
                              const float* bias, std::uint16_t* y16, int rows, int in, int out) {
  return run(stream, Kind::forward, type, w, x, y16, const_cast<float*>(bias), out, rows, in);
}

bool LtMatmul::weight_grad(cudaStream_t stream, DType type, const std::uint16_t* dy, const std::uint16_t* x,
                           std::uint16_t* dw16, std::uint16_t* db16, int rows, int in, int out) {
  return run(stream, Kind::weight_grad, type, x, dy, dw16, db16, in, out, rows);
}

// forward: A = W (op T), B = x (op N), the BIAS epilogue with an fp32 bias; weight_grad: A = x (op N),
// B = dy (op T), BGRADB with the bias gradient in D's type. D is m x n, column-major, packed.
LtMatmul::Plan LtMatmul::make_plan(Kind kind, DType type, const void* a, const void* b, const void* d, void* bias,
                                   int m, int n, int k) {
  Plan plan;
  const cudaDataType_t t = cuda_type(type);
  const bool forward = kind == Kind::forward;
  const cublasOperation_t op_a = forward ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = forward ? CUBLAS_OP_N : CUBLAS_OP_T;
  try {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
    set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
    const cublasLtEpilogue_t epilogue =
        !bias ? CUBLASLT_EPILOGUE_DEFAULT : forward ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
    set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    if (bias) {
      // An fp32 bias keeps "fp32 product + fp32 bias, rounded once"; the bias gradient comes rounded
      // to D's type, as the separate ops round it before adding it to the main grads.
      const std::int32_t bias_type = forward ? CUDA_R_32F : t;
      set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
      set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);  // the heuristic reads its alignment
    }
    if (op_a == CUBLAS_OP_N) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, t, m, k, m));
    else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, t, k, m, k));
    if (op_b == CUBLAS_OP_N) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, t, k, n, k));
    else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, t, n, k, n));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, t, m, n, m));

    const LtChoice choice = choose_algorithm(handle_, plan, workspace_bytes_, a, b, d);
    if (!choice.found) {
      last_refusal_ = std::string(forward ? "forward" : "weight gradient") + " " + dtype_name(type) + " m " +
                      std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                      (bias ? " with its bias" : "") + ": " +
                      (choice.status != CUBLAS_STATUS_SUCCESS ? cublasGetStatusName(choice.status) : "no algorithm");
      ++refusals_;
      release(plan);
      return plan;
    }
    plan.found = true;
    return plan;
  } catch (...) {
    release(plan);
    throw;
  }
}

bool LtMatmul::run(cudaStream_t stream, Kind kind, DType type, const void* a, const void* b, void* d, void* bias,
                   int m, int n, int k) {
  if (m <= 0 || n <= 0 || k <= 0 || (type != DType::f16 && type != DType::bf16)) return false;
  const Key key{int(kind), int(type), m, n, k, bias != nullptr, alignment(a), alignment(b), alignment(d), alignment(bias)};
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, make_plan(kind, type, a, b, d, bias, m, n, k)).first;
  Plan& plan = it->second;
  if (!plan.found) return false;
  if (bias) set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(handle_, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d, plan.d,
                                               d, plan.d, &plan.algo, workspace_, workspace_bytes_, stream);
  if ((status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) && !plan.ran) {
    // The heuristic's algorithm refused at its first run (a configuration the heuristic let through:
    // checked before any launch, nothing written): a refusal like the heuristic's, kept for the shape.
    last_refusal_ = std::string(kind == Kind::forward ? "forward" : "weight gradient") + " " + dtype_name(type) +
                    " m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                    (bias ? " with its bias" : "") + ": cublasLtMatmul " + cublasGetStatusName(status);
    ++refusals_;
    release(plan);
    return false;
  }
  CUBLAS_CHECK(status);
  plan.ran = true;
  ++products_;
  return true;
}

}  // namespace avtrain::cuda
