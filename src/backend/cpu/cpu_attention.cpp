// Multi-head attention, one (sample, head) per OpenMP iteration: its products are cblas_sgemm
// calls that read q, k, v in place inside qkv (leading dimension 3D) and write the context in
// place inside ctx (leading dimension D), so no head is ever copied out, and the L x L scores stay
// in cache between the two products and the softmax. In a 16-bit compute type the operands that are
// not exact in it (p, the output gradient, dS) are rounded first, so the fp32 products compute what
// a 16-bit product with fp32 accumulation computes.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/vector_math.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace avtrain {

namespace {

// In place on one row of scores: softmax over the keys with mask = 1; masked keys get exactly 0.
void masked_softmax_row(float* row, const std::uint8_t* mask, int L) {
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < L; ++j) m = mask[j] && row[j] > m ? row[j] : m;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < L; ++j) {
    const float e = mask[j] ? vmath::exp(row[j] - m) : 0.0f;
    row[j] = e;
    sum += e;
  }
  const float inv = sum > 0 ? 1.0f / sum : 0.0f;
#pragma omp simd
  for (int j = 0; j < L; ++j) row[j] *= inv;
}

// x rounded in place to `compute` (nothing for fp32).
void round_operand(DType compute, float* x, std::size_t n) {
  if (compute == DType::bf16) round_to_bf16(x, nullptr, n);
  if (compute == DType::f16) round_to_half(x, nullptr, n);
}

// An operand's n values in fp32: its own storage, or its 16-bit patterns unpacked into `unpacked`.
const float* values_of(Operand x, DType compute, std::size_t n, std::vector<float>& unpacked) {
  require(x.dtype == DType::f32 || x.dtype == compute, "internal: an attention operand is neither fp32 nor the compute type");
  if (x.dtype == DType::f32) return static_cast<const float*>(x.data);
  unpacked.resize(n);
  const auto* bits = static_cast<const std::uint16_t*>(x.data);
  if (x.dtype == DType::bf16) bf16_to_floats(bits, unpacked.data(), n);
  else half_to_floats(bits, unpacked.data(), n);
  return unpacked.data();
}

}  // namespace

void CpuBackend::attention_forward(DType compute, Operand qkv_operand, const std::uint8_t* key_mask, float* p,
                                   float* ctx, int B, int L, int H, int hd) {
  const int D = H * hd;
  std::vector<float> unpacked;
  const float* qkv = values_of(qkv_operand, compute, std::size_t(B) * L * 3 * D, unpacked);
  const float scale = 1.0f / std::sqrt(float(hd));
  gemm_flops_ += 4.0 * B * H * double(L) * L * hd;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const float* q = qkv + std::size_t(b) * L * 3 * D + h * hd;
      const float* k = q + D;
      const float* v = q + 2 * D;
      float* s = p + (std::size_t(b) * H + h) * L * L;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, hd, scale, q, 3 * D, k, 3 * D, 0.0f, s, L);
      for (int i = 0; i < L; ++i) masked_softmax_row(s + std::size_t(i) * L, key_mask + std::size_t(b) * L, L);
      round_operand(compute, s, std::size_t(L) * L);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, hd, L, 1.0f, s, L, v, 3 * D, 0.0f,
                  ctx + std::size_t(b) * L * D + h * hd, D);
    }
}

// dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P));  dQ = scale dS K;  dK = scale dS^T Q
void CpuBackend::attention_backward(DType compute, Operand qkv_operand, Operand p_operand, const float* dctx,
                                    float* dqkv, int B, int L, int H, int hd) {
  const int D = H * hd;
  std::vector<float> qkv_values, p_values;
  const float* qkv = values_of(qkv_operand, compute, std::size_t(B) * L * 3 * D, qkv_values);
  const float* p = values_of(p_operand, compute, std::size_t(B) * H * L * L, p_values);
  const float scale = 1.0f / std::sqrt(float(hd));
  gemm_flops_ += 8.0 * B * H * double(L) * L * hd;
#pragma omp parallel
  {
    std::vector<float> ds(std::size_t(L) * L);
    std::vector<float> rounded_dout(compute == DType::f32 ? 0 : std::size_t(L) * hd);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const std::size_t row0 = std::size_t(b) * L * 3 * D + h * hd;
        const float* q = qkv + row0;
        const float* k = q + D;
        const float* v = q + 2 * D;
        float* dq = dqkv + row0;
        float* dk = dq + D;
        float* dv = dq + 2 * D;
        const float* pr = p + (std::size_t(b) * H + h) * L * L;
        const float* dout = dctx + std::size_t(b) * L * D + h * hd;
        int ldo = D;
        if (compute != DType::f32) {  // the head's output gradient, rounded, side by side
          for (int i = 0; i < L; ++i)
            std::copy(dout + std::size_t(i) * D, dout + std::size_t(i) * D + hd, rounded_dout.data() + std::size_t(i) * hd);
          round_operand(compute, rounded_dout.data(), rounded_dout.size());
          dout = rounded_dout.data();
          ldo = hd;
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, hd, L, 1.0f, pr, L, dout, ldo, 0.0f, dv, 3 * D);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, hd, 1.0f, dout, ldo, v, 3 * D, 0.0f, ds.data(), L);
        for (int i = 0; i < L; ++i) {
          float* d = ds.data() + std::size_t(i) * L;
          const float* pi = pr + std::size_t(i) * L;
          float dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j < L; ++j) dot += d[j] * pi[j];
#pragma omp simd
          for (int j = 0; j < L; ++j) d[j] = pi[j] * (d[j] - dot);
        }
        round_operand(compute, ds.data(), ds.size());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, hd, L, scale, ds.data(), L, k, 3 * D, 0.0f, dq,
                    3 * D);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, hd, L, scale, ds.data(), L, q, 3 * D, 0.0f, dk,
                    3 * D);
      }
  }
}

}  // namespace avtrain
