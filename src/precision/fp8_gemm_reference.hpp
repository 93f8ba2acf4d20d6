#pragma once
// The product of two matrices in FP8, emulated exactly on the CPU: what an FP8 linear computes (on a
// GPU, cuBLASLt's FP8 matmul). Each operand is quantized with its delayed scale, fp8(x * scale); the
// fp8 values are multiplied in fp32 — exactly: a product of two fp8 values has at most 8 significant
// bits — and summed in fp32 in order of k; the sum is multiplied by alpha / (scale_a * scale_b), taken
// as alpha * (1 / scale_a) * (1 / scale_b) in fp32. Each operand's amax (largest |x|, before scaling)
// comes back for its delayed scaling.
#include "core/fp8.hpp"

namespace avtrain {

// A row-major matrix of fp32 values (a bf16 activation or weight widened), how it is to be quantized,
// and whether it is stored transposed: A is M x K (transposed: K x M), B is K x N (transposed: N x K).
struct Fp8GemmOperand {
  const float* values;
  int ld;  // elements between the starts of two stored rows
  bool transposed;
  Fp8Format format;
  float scale;
};

struct Fp8GemmAmax {
  float a, b;  // NaN where an operand holds a NaN
};

// C[M x N] (row-major, ldc) = alpha * (A_q B_q) / (scale_a scale_b) + beta * C; C is not read when
// beta is 0. Throws Error for a negative size or a leading dimension shorter than its rows.
Fp8GemmAmax fp8_gemm_reference(int M, int N, int K, float alpha, const Fp8GemmOperand& A, const Fp8GemmOperand& B,
                               float beta, float* C, int ldc);

}  // namespace avtrain
