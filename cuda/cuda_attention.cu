// Multi-head attention. Each product is one cublasGemmStridedBatchedEx call per sample over its H
// heads: inside a sample q, k, v (in qkv), a head's context (in ctx) and its probabilities (in p)
// stride uniformly by head, so the operands are read and written in place, and cuBLAS sees every
// base address and stride on the host (it picks kernels that fit their alignment: with L odd a
// head's probabilities start only 4-byte aligned).
// In a 16-bit compute type the products run on tensor cores with fp32 accumulation: qkv (exact in
// that type) is packed once into scratch, the probabilities are rounded and packed as the softmax
// leaves them, and the backward packs the output gradient and dS (rounding them, as the CPU does).
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

// The backward's dS scores (and, when p is not kept, the forward's and backward's probabilities) are
// worked in groups of samples of at most this size.
constexpr std::size_t kScoreScratchBytes = std::size_t(256) << 20;

// Samples per group: as many as kScoreScratchBytes of fp32 scores hold, at least one.
int score_group(std::size_t sample_scores, int B) {
  return int(std::clamp<std::size_t>(kScoreScratchBytes / (sample_scores * sizeof(float)), 1, std::size_t(B)));
}

cudaDataType_t operand_type(DType t) {
  return t == DType::f32 ? CUDA_R_32F : t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}

// A strided operand: where head 0 starts (bytes), its leading dimension and the stride from one
// head to the next (elements).
struct Heads {
  const void* base;
  int ld;
  long long stride;
};

// Row-major C[M,N] = alpha op(A)[M,K] op(B)[K,N] for each of `heads` strided triples, A and B in
// `type`, C in fp32, as the column-major product C^T = op(B)^T op(A)^T. fp32 operands follow the
// handle's math mode: TF32 only under --allow-tf32, as gemm().
void gemm_heads(cublasHandle_t handle, DType type, Trans ta, Trans tb, int M, int N, int K, float alpha, Heads A,
                Heads B, Heads C, int heads) {
  const float beta = 0.0f;
  const auto op = [](Trans t) { return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op(tb), op(ta), N, M, K, &alpha, B.base, operand_type(type), B.ld,
                                          B.stride, A.base, operand_type(type), A.ld, A.stride, &beta,
                                          const_cast<void*>(C.base), CUDA_R_32F, C.ld, C.stride, heads,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Byte address of element `offset` of an array of `elem`-byte elements.
const void* at(const void* base, std::size_t offset, std::size_t elem) {
  return static_cast<const char*>(base) + offset * elem;
}

// A value's 16-bit pattern in `type` (fp16 or bf16), round to nearest even, as pack() gives it.
__device__ std::uint16_t to_16(float v, DType type) { return type == DType::bf16 ? float_to_bf16(v) : float_to_half(v); }
__device__ float from_16(std::uint16_t h, DType type) { return type == DType::bf16 ? bf16_to_float(h) : half_to_float(h); }

// In place on each row of s[B*H*L, L] (already scaled): softmax over the keys with mask 1; masked
// keys exactly 0; a row with every key masked becomes all 0. With `packed`, each probability is
// rounded to `type` in place and its 16-bit pattern written there too (round_to, fused). With
// `stats`, each row's (max, 1 / sum) goes there.
__global__ void masked_softmax(float* s, const std::uint8_t* key_mask, int H, int L, std::size_t rows, DType type,
                               std::uint16_t* packed, float* stats) {
  const std::size_t r = std::size_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (r >= rows) return;
  float* row = s + r * L;
  const std::uint8_t* mask = key_mask + (r / (std::size_t(H) * L)) * L;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < L; j += kWarp)
    if (mask[j]) m = fmaxf(m, row[j]);
  m = warp_max(m);
  float sum = 0;
  for (int j = threadIdx.x; j < L; j += kWarp) {
    const float e = mask[j] ? expf(row[j] - m) : 0.0f;
    row[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  const float inv = sum > 0 ? 1.0f / sum : 0.0f;
  if (stats && threadIdx.x == 0) stats[2 * r] = m, stats[2 * r + 1] = inv;
  if (!packed) {
    for (int j = threadIdx.x; j < L; j += kWarp) row[j] *= inv;
    return;
  }
  std::uint16_t* row16 = packed + r * L;
  for (int j = threadIdx.x; j < L; j += kWarp) {
    const std::uint16_t h = to_16(row[j] * inv, type);
    row16[j] = h;
    row[j] = from_16(h, type);
  }
}

// The same probabilities again from the same scores and masked_softmax's row statistics: the same
// exponentials, the same products, the same roundings.
__global__ void softmax_again(float* s, const std::uint8_t* key_mask, const float* stats, int H, int L,
                              std::size_t rows, DType type, std::uint16_t* packed) {
  const std::size_t r = std::size_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (r >= rows) return;
  float* row = s + r * L;
  const std::uint8_t* mask = key_mask + (r / (std::size_t(H) * L)) * L;
  const float m = stats[2 * r], inv = stats[2 * r + 1];
  std::uint16_t* row16 = packed ? packed + r * L : nullptr;
  for (int j = threadIdx.x; j < L; j += kWarp) {
    const float e = mask[j] ? expf(row[j] - m) : 0.0f;
    if (!row16) {
      row[j] = e * inv;
      continue;
    }
    const std::uint16_t h = to_16(e * inv, type);
    row16[j] = h;
    row[j] = from_16(h, type);
  }
}

// P, read in fp32 or as 16-bit patterns of `type`.
struct Probabilities {
  const float* f32;
  const std::uint16_t* bits;  // used when f32 is null
  DType type;
  __device__ float operator[](std::size_t i) const { return f32 ? f32[i] : from_16(bits[i], type); }
};

// In place on each row of dP: dS = P * (dP - rowsum(dP * P)); with `packed`, dS goes there instead,
// as 16-bit patterns in `type` (pack, fused).
__global__ void softmax_backward(float* ds, Probabilities p, int L, std::size_t rows, DType type, std::uint16_t* packed) {
  const std::size_t r = std::size_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (r >= rows) return;
  float* d = ds + r * L;
  const std::size_t row = r * L;
  float dot = 0;
  for (int j = threadIdx.x; j < L; j += kWarp) dot += d[j] * p[row + j];
  dot = warp_sum(dot);
  if (!packed) {
    for (int j = threadIdx.x; j < L; j += kWarp) d[j] = p[row + j] * (d[j] - dot);
    return;
  }
  std::uint16_t* d16 = packed + row;
  for (int j = threadIdx.x; j < L; j += kWarp) d16[j] = to_16(p[row + j] * (d[j] - dot), type);
}


void require_operand(Operand x, DType compute, const char* what) {
  require(x.dtype == DType::f32 || x.dtype == compute,
          std::string("internal: attention operand ") + what + " is neither fp32 nor the compute type");
}

}  // namespace

// ctx in fp32, then rounded to its type (round_to); fused, a copy_only ctx in `compute` is written by
// the engine as its 16-bit patterns alone.
void CudaBackend::attention_forward(DType compute, Operand qkv, const std::uint8_t* key_mask, float* p,
                                    float* row_stats, Output ctx_out, int B, int L, int H, int hd) {
  if (B <= 0 || L <= 0 || H <= 0 || hd <= 0) return;
  require_operand(qkv, compute, "qkv");
  const std::size_t ctx_n = std::size_t(B) * L * H * hd;
  if (!p && fuses_attention(compute, hd)) {
    if (ctx_out.copy_only && ctx_out.copy.data && ctx_out.dtype() == compute)
      return fused_forward(compute, qkv, key_mask, row_stats, nullptr,
                           static_cast<std::uint16_t*>(ctx_out.copy.data), B, L, H, hd);
    fused_forward(compute, qkv, key_mask, row_stats, ctx_out.values, nullptr, B, L, H, hd);
    return round_to(ctx_out, ctx_n);
  }
  float* ctx = ctx_out.values;
  const int D = H * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  gemm_flops_ += 4.0 * B * H * double(L) * L * hd;
  const bool packed = compute != DType::f32, keep = p != nullptr;
  const std::size_t elem = dtype_size(compute), qkv_n = std::size_t(B) * L * 3 * D;
  const std::size_t sample_qkv = std::size_t(L) * 3 * D, sample_scores = std::size_t(H) * L * L;
  // Kept probabilities go straight into p, all samples at once; otherwise a group of samples at a
  // time goes through scratch.
  const int group = keep ? B : score_group(sample_scores, B);
  // Scratch: the group's scores (not kept), p packed (16-bit), qkv packed unless it comes in the
  // compute type already.
  const bool pack_qkv = packed && qkv.dtype == DType::f32;
  const std::size_t s_bytes = keep ? 0 : aligned(std::size_t(group) * sample_scores * sizeof(float));
  const std::size_t p16_bytes = packed ? aligned(std::size_t(group) * sample_scores * elem) : 0;
  const std::size_t qkv_bytes = pack_qkv ? aligned(qkv_n * elem) : 0;
  char* buf = static_cast<char*>(scratch(s_bytes + p16_bytes + qkv_bytes));
  float* s_scratch = reinterpret_cast<float*>(buf);
  auto* p16 = reinterpret_cast<std::uint16_t*>(buf + s_bytes);
  auto* qkv16 = reinterpret_cast<std::uint16_t*>(buf + s_bytes + p16_bytes);
  if (pack_qkv) pack(static_cast<const float*>(qkv.data), {qkv16, compute}, qkv_n);
  const void* q_in = pack_qkv ? static_cast<const void*>(qkv16) : qkv.data;
  const long long LL = (long long)L * L;
  for (int b0 = 0; b0 < B; b0 += group) {
    const int samples = std::min(group, B - b0);
    float* s = keep ? p + b0 * sample_scores : s_scratch;
    // S = scale Q K^T (fp32), per sample over its heads.
    for (int i = 0; i < samples; ++i) {
      const std::size_t q0 = (b0 + i) * sample_qkv;
      gemm_heads(cublas(), compute, Trans::no, Trans::yes, L, L, hd, scale, {at(q_in, q0, elem), 3 * D, hd},
                 {at(q_in, q0 + D, elem), 3 * D, hd}, {s + i * sample_scores, L, LL}, H);
    }
    // Softmax in place; in 16-bit p is rounded and its packed copy feeds P V.
    const std::size_t rows = std::size_t(samples) * H * L;
    masked_softmax<<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
        s, key_mask + std::size_t(b0) * L, H, L, rows, compute, packed ? p16 : nullptr,
        row_stats ? row_stats + std::size_t(b0) * H * L * 2 : nullptr);
    CUDA_CHECK_LAUNCH();
    const void* p_in = packed ? static_cast<const void*>(p16) : s;
    for (int i = 0; i < samples; ++i)
      gemm_heads(cublas(), compute, Trans::no, Trans::no, L, hd, L, 1.0f, {at(p_in, i * sample_scores, elem), L, LL},
                 {at(q_in, (b0 + i) * sample_qkv + 2 * D, elem), 3 * D, hd},
                 {ctx + std::size_t(b0 + i) * L * D, D, hd}, H);
  }
  round_to(ctx_out, ctx_n);
}

void CudaBackend::fused_forward(DType compute, Operand qkv, const std::uint8_t* key_mask, float* row_stats, float* ctx,
                                std::uint16_t* ctx16, int B, int L, int H, int hd) {
  gemm_flops_ += 4.0 * B * H * double(L) * L * hd;
  if (cudnn_takes(compute, B, L, H, hd)) return cudnn_forward(compute, qkv, key_mask, row_stats, ctx, ctx16, B, L, H, hd);
  // The own kernel: no L x L tensor (cuda_flash_attention.cu).
  const std::size_t qkv_n = std::size_t(B) * L * 3 * H * hd;
  const std::uint16_t* qkv16 = static_cast<const std::uint16_t*>(qkv.data);
  if (qkv.dtype == DType::f32) {
    auto* packed = static_cast<std::uint16_t*>(scratch(qkv_n * sizeof(std::uint16_t)));
    pack(static_cast<const float*>(qkv.data), {packed, compute}, qkv_n);
    qkv16 = packed;
  }
  flash_forward(compute, qkv16, key_mask, row_stats, ctx, ctx16, B, L, H, hd);
}

bool CudaBackend::fuses_backward(DType compute, const AttentionProbs& probs, int hd) const {
  return probs.recompute() && probs.out.data && probs.kept_as == compute && fuses_attention(compute, hd);
}

void CudaBackend::fused_backward(DType compute, Operand qkv, const AttentionProbs& probs, const float* dctx, float* dqkv,
                                 std::uint16_t* dqkv16, int B, int L, int H, int hd) {
  require_operand(probs.out, compute, "out");
  if (cudnn_takes(compute, B, L, H, hd)) {  // cuDNN's SDPA: S, dP, dV, dK, dQ
    gemm_flops_ += 10.0 * B * H * double(L) * L * hd;
    return cudnn_backward(compute, qkv, probs.key_mask, probs.row_stats, probs.out, dctx, dqkv, dqkv16, B, L, H, hd);
  }
  // The own kernel. Scratch: dctx packed (rounded, as the unfused products take it), the rows'
  // dot(dctx, ctx), and qkv packed where it comes in fp32.
  const int D = H * hd;
  const std::size_t qkv_n = std::size_t(B) * L * 3 * D, out_n = std::size_t(B) * L * D;
  const std::size_t o_bytes = aligned(out_n * sizeof(std::uint16_t)), dot_bytes = aligned(std::size_t(B) * H * L * sizeof(float));
  const std::size_t qkv_bytes = qkv.dtype == DType::f32 ? aligned(qkv_n * sizeof(std::uint16_t)) : 0;
  char* buf = static_cast<char*>(scratch(o_bytes + dot_bytes + qkv_bytes));
  auto* o16 = reinterpret_cast<std::uint16_t*>(buf);
  auto* dot = reinterpret_cast<float*>(buf + o_bytes);
  const std::uint16_t* qkv16 = static_cast<const std::uint16_t*>(qkv.data);
  if (qkv_bytes) {
    auto* packed = reinterpret_cast<std::uint16_t*>(buf + o_bytes + dot_bytes);
    pack(static_cast<const float*>(qkv.data), {packed, compute}, qkv_n);
    qkv16 = packed;
  }
  pack(dctx, {o16, compute}, out_n);
  // Issued: S and dP twice (once per kernel), dV, dK, dQ.
  gemm_flops_ += 14.0 * B * H * double(L) * L * hd;
  flash_backward(compute, qkv16, probs.key_mask, probs.row_stats, probs.out, o16, dot, dqkv, dqkv16, B, L, H, hd);
}

// dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P));  dQ = scale dS K;  dK = scale dS^T Q;
// dqkv in fp32, then rounded to its type (round_to). Fused, a copy_only dqkv in `compute` is written
// by the engine as its 16-bit patterns alone.
void CudaBackend::attention_backward(DType compute, Operand qkv, const AttentionProbs& probs, const float* dctx,
                                     Output dqkv_out, int B, int L, int H, int hd) {
  if (B <= 0 || L <= 0 || H <= 0 || hd <= 0) return;
  require_operand(qkv, compute, "qkv");
  const bool recompute = probs.recompute();
  require(!recompute || (probs.key_mask && probs.row_stats), "internal: attention recomputation without its statistics");
  if (!recompute) require_operand(probs.p, compute, "p");
  const Operand p = probs.p;
  const std::size_t dqkv_n = std::size_t(B) * L * 3 * H * hd;
  if (fuses_backward(compute, probs, hd)) {
    if (dqkv_out.copy_only && dqkv_out.copy.data && dqkv_out.dtype() == compute)
      return fused_backward(compute, qkv, probs, dctx, nullptr, static_cast<std::uint16_t*>(dqkv_out.copy.data), B, L,
                            H, hd);
    fused_backward(compute, qkv, probs, dctx, dqkv_out.values, nullptr, B, L, H, hd);
    return round_to(dqkv_out, dqkv_n);
  }
  float* dqkv = dqkv_out.values;
  const int D = H * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  gemm_flops_ += (recompute ? 10.0 : 8.0) * B * H * double(L) * L * hd;
  const bool packed = compute != DType::f32;
  const std::size_t elem = dtype_size(compute);
  const std::size_t sample_qkv = std::size_t(L) * 3 * D, sample_out = std::size_t(L) * D;
  const std::size_t sample_scores = std::size_t(H) * L * L;
  const std::size_t qkv_n = B * sample_qkv, out_n = B * sample_out;
  const int group = score_group(sample_scores, B);
  // One scratch: dP/dS for one group of samples (and its packed copy), the group's p recomputed
  // (fp32) or packed where it comes in fp32, then (16-bit) dctx packed and qkv packed where it comes
  // in fp32 (the layers hand over their 16-bit copies, read as they are).
  const bool pack_qkv = packed && qkv.dtype == DType::f32;
  const bool pack_p = packed && (recompute || p.dtype == DType::f32);
  const std::size_t ds_bytes = aligned(sample_scores * group * sizeof(float));
  const std::size_t ds16_bytes = packed ? aligned(sample_scores * group * elem) : 0;
  const std::size_t p32_bytes = recompute ? aligned(sample_scores * group * sizeof(float)) : 0;
  const std::size_t p16_bytes = pack_p ? aligned(sample_scores * group * elem) : 0;
  const std::size_t qkv_bytes = pack_qkv ? aligned(qkv_n * elem) : 0, o_bytes = packed ? aligned(out_n * elem) : 0;
  char* buf = static_cast<char*>(scratch(ds_bytes + ds16_bytes + p32_bytes + p16_bytes + qkv_bytes + o_bytes));
  float* ds = reinterpret_cast<float*>(buf);
  char* next = buf + ds_bytes;
  auto* ds16 = reinterpret_cast<std::uint16_t*>(next);
  next += ds16_bytes;
  float* p32 = reinterpret_cast<float*>(next);
  next += p32_bytes;
  auto* p16 = reinterpret_cast<std::uint16_t*>(next);
  next += p16_bytes;
  auto* qkv16 = reinterpret_cast<std::uint16_t*>(next);
  next += qkv_bytes;
  auto* o16 = reinterpret_cast<std::uint16_t*>(next);
  if (pack_qkv) pack(static_cast<const float*>(qkv.data), {qkv16, compute}, qkv_n);  // exact
  if (packed) pack(dctx, {o16, compute}, out_n);                                     // rounded
  const void* q_in = pack_qkv ? static_cast<const void*>(qkv16) : qkv.data;
  const void* o_in = packed ? static_cast<const void*>(o16) : dctx;
  const void* ds_in = packed ? static_cast<const void*>(ds16) : ds;
  const long long LL = (long long)L * L;
  for (int b0 = 0; b0 < B; b0 += group) {
    const int samples = std::min(group, B - b0);
    const std::size_t rows = std::size_t(samples) * H * L;
    // This group's P: the products' operand in the compute type, and what the softmax backward reads.
    const void* p_in = nullptr;
    Probabilities p_read{nullptr, nullptr, DType::f32};
    if (recompute) {  // S = scale Q K^T as forward computed it, then the same softmax
      for (int i = 0; i < samples; ++i) {
        const std::size_t q0 = (b0 + i) * sample_qkv;
        gemm_heads(cublas(), compute, Trans::no, Trans::yes, L, L, hd, scale, {at(q_in, q0, elem), 3 * D, hd},
                   {at(q_in, q0 + D, elem), 3 * D, hd}, {p32 + i * sample_scores, L, LL}, H);
      }
      softmax_again<<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
          p32, probs.key_mask + std::size_t(b0) * L, probs.row_stats + std::size_t(b0) * H * L * 2, H, L, rows,
          compute, packed ? p16 : nullptr);
      CUDA_CHECK_LAUNCH();
      if (probs.kept_as != compute && probs.kept_as != DType::f32)  // as the copy a layer keeps in that type
        round_to(rounded(p32, probs.kept_as), samples * sample_scores);
      p_read.f32 = p32;
      p_in = packed ? static_cast<const void*>(p16) : p32;
    } else {
      p_in = at(p.data, b0 * sample_scores, dtype_size(p.dtype));
      p_read = {p.dtype == DType::f32 ? static_cast<const float*>(p_in) : nullptr,
                p.dtype == DType::f32 ? nullptr : static_cast<const std::uint16_t*>(p_in), p.dtype};
      if (pack_p) {  // exact: forward returned p rounded
        pack(static_cast<const float*>(p_in), {p16, compute}, samples * sample_scores);
        p_in = p16;
      }
    }
    for (int s = 0; s < samples; ++s) {  // dV = P^T dO;  dP = dO V^T
      const std::size_t q0 = (b0 + s) * sample_qkv, o0 = (b0 + s) * sample_out;
      gemm_heads(cublas(), compute, Trans::yes, Trans::no, L, hd, L, 1.0f, {at(p_in, s * sample_scores, elem), L, LL},
                 {at(o_in, o0, elem), D, hd}, {dqkv + q0 + 2 * D, 3 * D, hd}, H);
      gemm_heads(cublas(), compute, Trans::no, Trans::yes, L, L, hd, 1.0f, {at(o_in, o0, elem), D, hd},
                 {at(q_in, q0 + 2 * D, elem), 3 * D, hd}, {ds + s * sample_scores, L, LL}, H);
    }
    softmax_backward<<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
        ds, p_read, L, rows, compute, packed ? ds16 : nullptr);  // dS, rounded into ds16 in 16-bit
    CUDA_CHECK_LAUNCH();
    for (int s = 0; s < samples; ++s) {  // dQ = scale dS K;  dK = scale dS^T Q
      const std::size_t q0 = (b0 + s) * sample_qkv;
      gemm_heads(cublas(), compute, Trans::no, Trans::no, L, hd, L, scale, {at(ds_in, s * sample_scores, elem), L, LL},
                 {at(q_in, q0 + D, elem), 3 * D, hd}, {dqkv + q0, 3 * D, hd}, H);
      gemm_heads(cublas(), compute, Trans::yes, Trans::no, L, hd, L, scale, {at(ds_in, s * sample_scores, elem), L, LL},
                 {at(q_in, q0, elem), 3 * D, hd}, {dqkv + q0 + D, 3 * D, hd}, H);
    }
  }
  round_to(dqkv_out, dqkv_n);
}

}  // namespace avtrain::cuda
