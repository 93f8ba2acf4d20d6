// Multi-head attention, one (sample, head) per OpenMP iteration, worked in blocks of query rows so
// that a block's scores (rows x L) stay in cache through the products and the softmax around them:
// the block's rows of S = scale q k^T, their softmax, their rows of ctx = P v; backward the block's
// P (kept, or recomputed from q, k and the row statistics), its share of dV += P^T dO, its dP = dO v^T
// and dS, its rows of dQ = scale dS k and its share of dK += scale dS^T q. The products are
// cblas_sgemm calls that read q, k, v in place inside qkv (leading dimension 3D) and write ctx and
// dqkv in place, so no head is ever copied out. The block size depends on L alone, and kept and
// recomputed probabilities go through the same products in the same order: the same bits either way,
// on any thread count. In a 16-bit compute type the operands that are not exact in it (p, the output
// gradient, dS) are rounded first, so the fp32 products compute what a 16-bit product with fp32
// accumulation computes. 16-bit qkv and p are widened a sample's qkv rows or a head's p at a time on
// the thread that reads them (WidenedParts), never as whole-tensor copies.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/vector_math.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace avtrain {

namespace {

// The largest score over the keys with mask = 1 (-inf when there is none).
float masked_row_max(const float* row, const std::uint8_t* mask, int L) {
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < L; ++j) m = mask[j] && row[j] > m ? row[j] : m;
  return m;
}

// In place: exp(s - m) where mask = 1, exactly 0 elsewhere; returns their sum. Forward and the
// recomputation both exponentiate through here, so their probabilities agree to the bit.
float exponentiate_row(float* row, const std::uint8_t* mask, float m, int L) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < L; ++j) {
    const float e = mask[j] ? vmath::exp(row[j] - m) : 0.0f;
    row[j] = e;
    sum += e;
  }
  return sum;
}

void scale_row(float* row, float inv, int L) {
#pragma omp simd
  for (int j = 0; j < L; ++j) row[j] *= inv;
}

// x rounded in place to `type` (nothing for fp32).
void round_operand(DType type, float* x, std::size_t n) {
  if (type == DType::bf16) round_to_bf16(x, nullptr, n);
  if (type == DType::f16) round_to_half(x, nullptr, n);
}

// Values of a 16-bit operand widened (exactly) where a thread works on them, not as a whole-tensor
// copy: a sample's qkv rows (L x 3D, qkv's own leading dimension, so the products see the same
// operands as before) or a head's p (L x L). of(i) gives part i's values: the operand's own storage
// in fp32, else its patterns widened into this thread's buffer when i is not the part already there.
class WidenedParts {
 public:
  WidenedParts(Operand x, DType compute, std::size_t part_size)
      : x_(x), part_size_(part_size), buffer_(x.dtype == DType::f32 ? nullptr : new float[part_size]) {
    require(x.dtype == DType::f32 || x.dtype == compute,
            "internal: an attention operand is neither fp32 nor the compute type");
  }
  const float* of(std::size_t i) {
    if (x_.dtype == DType::f32) return static_cast<const float*>(x_.data) + i * part_size_;
    if (i != current_) {
      const auto* bits = static_cast<const std::uint16_t*>(x_.data) + i * part_size_;
      if (x_.dtype == DType::bf16) bf16_to_floats(bits, buffer_.get(), part_size_);
      else half_to_floats(bits, buffer_.get(), part_size_);
      current_ = i;
    }
    return buffer_.get();
  }

 private:
  Operand x_;
  std::size_t part_size_, current_ = std::size_t(-1);
  std::unique_ptr<float[]> buffer_;  // not zeroed: every element is written before it is read
};

// Query rows per block: a block of scores of at most 32768 floats (128 KiB), at least one row.
int rows_per_block(int L) { return std::clamp(32768 / std::max(L, 1), 1, std::max(L, 1)); }

// A block's scores s[rows, L] = scale q[rows] k^T (q, k rows of leading dimension 3D inside qkv).
void block_scores(const float* q, const float* k, float scale, float* s, int rows, int L, int D, int hd) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, L, hd, scale, q, 3 * D, k, 3 * D, 0.0f, s, L);
}

// A block's probabilities from its scores, in place, rounded to `compute`; with `stats`, each row's
// (max, 1 / sum) is written there.
void block_softmax(DType compute, float* s, const std::uint8_t* mask, float* stats, int rows, int L) {
  for (int i = 0; i < rows; ++i) {
    float* row = s + std::size_t(i) * L;
    const float m = masked_row_max(row, mask, L);
    const float sum = exponentiate_row(row, mask, m, L);
    const float inv = sum > 0 ? 1.0f / sum : 0.0f;
    scale_row(row, inv, L);
    if (stats) stats[2 * i] = m, stats[2 * i + 1] = inv;
  }
  round_operand(compute, s, std::size_t(rows) * L);
}

// The same probabilities again from the same scores and forward's row statistics.
void block_softmax_again(DType compute, float* s, const std::uint8_t* mask, const float* stats, int rows, int L) {
  for (int i = 0; i < rows; ++i) {
    float* row = s + std::size_t(i) * L;
    exponentiate_row(row, mask, stats[2 * i], L);
    scale_row(row, stats[2 * i + 1], L);
  }
  round_operand(compute, s, std::size_t(rows) * L);
}

}  // namespace

void CpuBackend::attention_forward(DType compute, Operand qkv_operand, const std::uint8_t* key_mask, float* p,
                                   float* row_stats, Output ctx_out, int B, int L, int H, int hd) {
  const int D = H * hd, R = rows_per_block(L);
  float* ctx = ctx_out.values;
  const float scale = 1.0f / std::sqrt(float(hd));
  gemm_flops_ += 4.0 * B * H * double(L) * L * hd;
#pragma omp parallel
  {
    WidenedParts samples(qkv_operand, compute, std::size_t(L) * 3 * D);
    std::vector<float> block(p ? 0 : std::size_t(R) * L);  // a block's probabilities when none are kept
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const float* q = samples.of(b) + h * hd;
        const float* k = q + D;
        const float* v = q + 2 * D;
        const std::size_t bh = std::size_t(b) * H + h;
        for (int i0 = 0; i0 < L; i0 += R) {
          const int rows = std::min(R, L - i0);
          float* s = p ? p + (bh * L + std::size_t(i0)) * L : block.data();
          block_scores(q + std::size_t(i0) * 3 * D, k, scale, s, rows, L, D, hd);
          block_softmax(compute, s, key_mask + std::size_t(b) * L, row_stats ? row_stats + (bh * L + std::size_t(i0)) * 2 : nullptr,
                        rows, L);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, L, 1.0f, s, L, v, 3 * D, 0.0f,
                      ctx + (std::size_t(b) * L + std::size_t(i0)) * D + h * hd, D);
        }
      }
  }
  round_to(ctx_out, std::size_t(B) * L * D);
}

// Per block of rows: dV += P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P));  dQ = scale dS K;
// dK += scale dS^T Q.
void CpuBackend::attention_backward(DType compute, Operand qkv_operand, const AttentionProbs& probs, const float* dctx,
                                    Output dqkv_out, int B, int L, int H, int hd) {
  const int D = H * hd, R = rows_per_block(L);
  float* dqkv = dqkv_out.values;
  const bool recompute = probs.recompute();
  require(!recompute || (probs.key_mask && probs.row_stats), "internal: attention recomputation without its statistics");
  const float scale = 1.0f / std::sqrt(float(hd));
  gemm_flops_ += (recompute ? 10.0 : 8.0) * B * H * double(L) * L * hd;
#pragma omp parallel
  {
    WidenedParts samples(qkv_operand, compute, std::size_t(L) * 3 * D);
    std::unique_ptr<WidenedParts> heads_p;  // each (sample, head)'s kept probabilities
    if (!recompute) heads_p = std::make_unique<WidenedParts>(probs.p, compute, std::size_t(L) * L);
    std::vector<float> ds(std::size_t(R) * L);
    std::vector<float> again(recompute ? std::size_t(R) * L : 0);  // a block's probabilities, recomputed
    std::vector<float> rounded_dout(compute == DType::f32 ? 0 : std::size_t(L) * hd);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const std::size_t row0 = std::size_t(b) * L * 3 * D + h * hd;
        const float* q = samples.of(b) + h * hd;
        const float* k = q + D;
        const float* v = q + 2 * D;
        float* dq = dqkv + row0;
        float* dk = dq + D;
        float* dv = dq + 2 * D;
        const std::size_t bh = std::size_t(b) * H + h;
        const float* p = heads_p ? heads_p->of(bh) : nullptr;
        const float* dout = dctx + std::size_t(b) * L * D + h * hd;
        int ldo = D;
        if (compute != DType::f32) {  // the head's output gradient, rounded, side by side
          for (int i = 0; i < L; ++i)
            std::copy(dout + std::size_t(i) * D, dout + std::size_t(i) * D + hd, rounded_dout.data() + std::size_t(i) * hd);
          round_operand(compute, rounded_dout.data(), rounded_dout.size());
          dout = rounded_dout.data();
          ldo = hd;
        }
        for (int i0 = 0; i0 < L; i0 += R) {
          const int rows = std::min(R, L - i0);
          const float beta = i0 == 0 ? 0.0f : 1.0f;  // dV and dK: the first block writes, the others add
          const float* pr = p ? p + std::size_t(i0) * L : again.data();
          if (recompute) {
            block_scores(q + std::size_t(i0) * 3 * D, k, scale, again.data(), rows, L, D, hd);
            block_softmax_again(compute, again.data(), probs.key_mask + std::size_t(b) * L,
                                probs.row_stats + (bh * L + std::size_t(i0)) * 2, rows, L);
            if (probs.kept_as != compute) round_operand(probs.kept_as, again.data(), std::size_t(rows) * L);
          }
          const float* dout_rows = dout + std::size_t(i0) * ldo;
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, hd, rows, 1.0f, pr, L, dout_rows, ldo, beta, dv, 3 * D);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, L, hd, 1.0f, dout_rows, ldo, v, 3 * D, 0.0f,
                      ds.data(), L);
          for (int i = 0; i < rows; ++i) {
            float* d = ds.data() + std::size_t(i) * L;
            const float* pi = pr + std::size_t(i) * L;
            float dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < L; ++j) dot += d[j] * pi[j];
#pragma omp simd
            for (int j = 0; j < L; ++j) d[j] = pi[j] * (d[j] - dot);
          }
          round_operand(compute, ds.data(), std::size_t(rows) * L);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, L, scale, ds.data(), L, k, 3 * D, 0.0f,
                      dq + std::size_t(i0) * 3 * D, 3 * D);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, hd, rows, scale, ds.data(), L,
                      q + std::size_t(i0) * 3 * D, 3 * D, beta, dk, 3 * D);
        }
      }
  }
  round_to(dqkv_out, std::size_t(B) * L * 3 * D);
}

}  // namespace avtrain
