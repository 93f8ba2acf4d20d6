#include "precision/fp8_gemm_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace avtrain {

namespace {

// The operand's logical rows x cols (stored transposed or not) as a dense row-major matrix of the fp8
// values it quantizes to, and its amax.
std::vector<float> quantized(const Fp8GemmOperand& op, int rows, int cols, float& amax) {
  const int stored_rows = op.transposed ? cols : rows, stored_cols = op.transposed ? rows : cols;
  std::vector<float> stored(std::size_t(stored_rows) * stored_cols);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(stored_cols));
  amax = 0.0f;
  for (int r = 0; r < stored_rows; ++r) {
    const float* row = op.values + std::size_t(r) * op.ld;
    const float row_amax = abs_max(row, std::size_t(stored_cols));
    if (!std::isnan(amax) && (std::isnan(row_amax) || row_amax > amax)) amax = row_amax;  // NaN, once in, stays
    quantize_fp8(op.format, row, op.scale, codes.data(), codes.size());
    dequantize_fp8(op.format, codes.data(), 1.0f, stored.data() + std::size_t(r) * stored_cols, codes.size());
  }
  if (!op.transposed) return stored;
  std::vector<float> logical(stored.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) logical[std::size_t(r) * cols + c] = stored[std::size_t(c) * stored_cols + r];
  return logical;
}

void check_layout(const char* name, const Fp8GemmOperand& op, int rows, int cols) {
  const int stored_cols = op.transposed ? rows : cols;
  if (op.ld < std::max(stored_cols, 1))
    throw Error(std::string("fp8_gemm_reference: ") + name + "'s leading dimension " + std::to_string(op.ld) +
                " is shorter than its rows of " + std::to_string(stored_cols));
}

}  // namespace

Fp8GemmAmax fp8_gemm_reference(int M, int N, int K, float alpha, const Fp8GemmOperand& A, const Fp8GemmOperand& B,
                               float beta, float* C, int ldc) {
  if (M < 0 || N < 0 || K < 0)
    throw Error("fp8_gemm_reference: negative size " + std::to_string(M) + " x " + std::to_string(N) + " x " +
                std::to_string(K));
  check_layout("A", A, M, K);
  check_layout("B", B, K, N);
  if (ldc < std::max(N, 1)) throw Error("fp8_gemm_reference: ldc " + std::to_string(ldc) + " is shorter than N");
  Fp8GemmAmax amax{};
  const std::vector<float> a = quantized(A, M, K, amax.a), b = quantized(B, K, N, amax.b);
  const float factor = alpha * (1.0f / A.scale) * (1.0f / B.scale);
  std::vector<float> sum(static_cast<std::size_t>(N));
  for (int i = 0; i < M; ++i) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int k = 0; k < K; ++k) {
      const float aik = a[std::size_t(i) * K + k];
      const float* bk = b.data() + std::size_t(k) * N;
      for (int j = 0; j < N; ++j) sum[j] += aik * bk[j];  // aik * bk[j] is exact; one rounding per add
    }
    float* c = C + std::size_t(i) * ldc;
    for (int j = 0; j < N; ++j) c[j] = beta == 0.0f ? factor * sum[j] : factor * sum[j] + beta * c[j];
  }
  return amax;
}

}  // namespace avtrain
