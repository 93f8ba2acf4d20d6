// Multi-head attention over all (sample, head) pairs at once. Each product is one
// cublasGemmBatchedEx call over B*H pointer triples: q, k, v sit in place inside qkv and a head's
// context in place inside ctx, whose offsets stride by head inside a sample and by sample
// otherwise, which one uniform stride (strided-batched) cannot express without a loop over samples.
// A small kernel writes the pointer arrays into scratch, so nothing is copied from the host.
// In a 16-bit compute type the products run on tensor cores with fp32 accumulation: qkv (exact in
// that type) is packed once into scratch, the probabilities are rounded and packed as the softmax
// leaves them, and the backward packs the output gradient and dS (rounding them, as the CPU does).
#include <algorithm>
#include <cmath>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"

namespace avtrain::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
// The backward's dS scores are worked in groups of samples of at most this size.
constexpr std::size_t kScoreScratchBytes = std::size_t(256) << 20;

__device__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Per (sample, head) i = b*H + h: where that head's operands start. One array type for inputs and
// outputs alike (cuBLAS reads A and B and writes C whatever the array's constness).
struct HeadPointers {
  // Operands, in the compute type: q, k, v; p; o: dctx; ds_in: dS as a product's input.
  void **q, **k, **v, **p, **o, **ds_in;
  // Results, fp32: scores (forward, into p), ctx; dq, dk, dv; ds (dP, then dS in place).
  void **scores, **ctx, **dq, **dk, **dv, **ds;
};
constexpr int kPointerArrays = 12;

// Where the operands live (elem: their element size, 4 or 2 bytes) and the results go; null where
// a pass has none. The backward's dS is one scratch block (and its packed copy) reused for each
// group of `group` samples.
struct HeadLayout {
  const char *qkv, *p, *o, *ds_in;
  std::size_t elem;
  float *scores, *ctx, *dqkv, *ds;
  int B, L, H, hd, group;
};

__global__ void head_pointers(HeadLayout lay, HeadPointers ptr) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= lay.B * lay.H) return;
  const int b = i / lay.H, h = i % lay.H;
  const int D = lay.H * lay.hd;
  const std::size_t head = std::size_t(b) * lay.L * 3 * D + std::size_t(h) * lay.hd;
  const std::size_t ctx = std::size_t(b) * lay.L * D + std::size_t(h) * lay.hd;
  const std::size_t scores = std::size_t(i) * lay.L * lay.L;
  const std::size_t group_scores = std::size_t(i % (lay.group * lay.H)) * lay.L * lay.L;
  const auto in = [&](const char* base, std::size_t offset) { return const_cast<char*>(base) + offset * lay.elem; };
  ptr.q[i] = in(lay.qkv, head);
  ptr.k[i] = in(lay.qkv, head + D);
  ptr.v[i] = in(lay.qkv, head + 2 * D);
  ptr.p[i] = in(lay.p, scores);
  if (lay.o) ptr.o[i] = in(lay.o, ctx);
  if (lay.ds_in) ptr.ds_in[i] = in(lay.ds_in, group_scores);
  if (lay.scores) ptr.scores[i] = lay.scores + scores;
  if (lay.ctx) ptr.ctx[i] = lay.ctx + ctx;
  if (lay.dqkv) {
    ptr.dq[i] = lay.dqkv + head;
    ptr.dk[i] = lay.dqkv + head + D;
    ptr.dv[i] = lay.dqkv + head + 2 * D;
  }
  if (lay.ds) ptr.ds[i] = lay.ds + group_scores;
}

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }
std::size_t pointer_bytes(int n) { return aligned(kPointerArrays * sizeof(void*) * std::size_t(n)); }

HeadPointers carve_pointers(void* base, int n) {
  void** a = static_cast<void**>(base);
  const auto at = [&](int k) { return a + std::size_t(k) * n; };
  return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10), at(11)};
}

cudaDataType_t operand_type(DType t) {
  return t == DType::f32 ? CUDA_R_32F : t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}

// Row-major C[M,N] = alpha op(A)[M,K] op(B)[K,N] for each of `batch` pointer triples, A and B in
// `type`, C in fp32, as the column-major product C^T = op(B)^T op(A)^T. fp32 keeps TF32 off.
void gemm_batched(cublasHandle_t handle, DType type, Trans ta, Trans tb, int M, int N, int K, float alpha,
                  void* const* A, int lda, void* const* B, int ldb, void* const* C, int ldc, int batch) {
  const float beta = 0.0f;
  const auto op = [](Trans t) { return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
  CUBLAS_CHECK(cublasGemmBatchedEx(handle, op(tb), op(ta), N, M, K, &alpha, const_cast<const void* const*>(B),
                                   operand_type(type), ldb, const_cast<const void* const*>(A), operand_type(type), lda,
                                   &beta, C, CUDA_R_32F, ldc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// In place on each row of s[B*H*L, L] (already scaled): softmax over the keys with mask 1; masked
// keys exactly 0; a row with every key masked becomes all 0.
__global__ void masked_softmax(float* s, const std::uint8_t* key_mask, int H, int L, std::size_t rows) {
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
  for (int j = threadIdx.x; j < L; j += kWarp) row[j] *= inv;
}

// In place on each row of dP: dS = P * (dP - rowsum(dP * P)).
__global__ void softmax_backward(float* ds, const float* p, int L, std::size_t rows) {
  const std::size_t r = std::size_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (r >= rows) return;
  float* d = ds + r * L;
  const float* pr = p + r * L;
  float dot = 0;
  for (int j = threadIdx.x; j < L; j += kWarp) dot += d[j] * pr[j];
  dot = warp_sum(dot);
  for (int j = threadIdx.x; j < L; j += kWarp) d[j] = pr[j] * (d[j] - dot);
}

unsigned row_blocks(std::size_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void CudaBackend::attention_forward(DType compute, const float* qkv, const std::uint8_t* key_mask, float* p,
                                    float* ctx, int B, int L, int H, int hd) {
  if (B <= 0 || L <= 0 || H <= 0 || hd <= 0) return;
  const int D = H * hd, n = B * H;
  const float scale = 1.0f / std::sqrt(float(hd));
  gemm_flops_ += 4.0 * B * H * double(L) * L * hd;
  const bool packed = compute != DType::f32;
  const std::size_t elem = dtype_size(compute), qkv_n = std::size_t(B) * L * 3 * D, scores = std::size_t(n) * L * L;
  // Scratch: the pointer arrays, then (16-bit) qkv and p packed.
  char* buf = static_cast<char*>(scratch(pointer_bytes(n) + (packed ? aligned(qkv_n * elem) + scores * elem : 0)));
  auto* qkv16 = reinterpret_cast<std::uint16_t*>(buf + pointer_bytes(n));
  auto* p16 = reinterpret_cast<std::uint16_t*>(buf + pointer_bytes(n) + aligned(qkv_n * elem));
  if (packed) pack(compute, qkv, qkv16, qkv_n);
  const auto bytes = [](const void* x) { return static_cast<const char*>(x); };
  const HeadPointers ptr = carve_pointers(buf, n);
  const HeadLayout lay{packed ? bytes(qkv16) : bytes(qkv), packed ? bytes(p16) : bytes(p), nullptr, nullptr, elem,
                       p, ctx, nullptr, nullptr, B, L, H, hd, 1};
  head_pointers<<<(n + 255) / 256, 256, 0, stream_>>>(lay, ptr);
  CUDA_CHECK_LAUNCH();
  // S = scale Q K^T straight into p (fp32), softmax in place, then ctx = P V (P packed in 16-bit).
  gemm_batched(cublas(), compute, Trans::no, Trans::yes, L, L, hd, scale, ptr.q, 3 * D, ptr.k, 3 * D, ptr.scores, L, n);
  const std::size_t rows = std::size_t(n) * L;
  masked_softmax<<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(p, key_mask, H, L, rows);
  CUDA_CHECK_LAUNCH();
  if (packed) round_to(compute, p, p16, scores);  // p returned rounded; its 16-bit copy feeds P V
  gemm_batched(cublas(), compute, Trans::no, Trans::no, L, hd, L, 1.0f, ptr.p, L, ptr.v, 3 * D, ptr.ctx, D, n);
}

// dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P));  dQ = scale dS K;  dK = scale dS^T Q
void CudaBackend::attention_backward(DType compute, const float* qkv, const float* p, const float* dctx, float* dqkv,
                                     int B, int L, int H, int hd) {
  if (B <= 0 || L <= 0 || H <= 0 || hd <= 0) return;
  const int D = H * hd, n = B * H;
  const float scale = 1.0f / std::sqrt(float(hd));
  gemm_flops_ += 8.0 * B * H * double(L) * L * hd;
  const bool packed = compute != DType::f32;
  const std::size_t elem = dtype_size(compute);
  const std::size_t qkv_n = std::size_t(B) * L * 3 * D, scores = std::size_t(n) * L * L, out_n = std::size_t(B) * L * D;
  const std::size_t sample_scores = std::size_t(H) * L * L;
  const int group = int(std::clamp<std::size_t>(kScoreScratchBytes / (sample_scores * sizeof(float)), 1, std::size_t(B)));
  // One scratch: the pointer arrays, dS for one group of samples (and its packed copy), then
  // (16-bit) qkv, p and dctx packed.
  const std::size_t ds_bytes = aligned(sample_scores * group * sizeof(float));
  const std::size_t ds16_bytes = packed ? aligned(sample_scores * group * elem) : 0;
  const std::size_t qkv_bytes = packed ? aligned(qkv_n * elem) : 0, p_bytes = packed ? aligned(scores * elem) : 0;
  const std::size_t o_bytes = packed ? aligned(out_n * elem) : 0;
  char* buf = static_cast<char*>(scratch(pointer_bytes(n) + ds_bytes + ds16_bytes + qkv_bytes + p_bytes + o_bytes));
  char* at = buf + pointer_bytes(n);
  float* ds = reinterpret_cast<float*>(at);
  auto* ds16 = reinterpret_cast<std::uint16_t*>(at += ds_bytes);
  auto* qkv16 = reinterpret_cast<std::uint16_t*>(at += ds16_bytes);
  auto* p16 = reinterpret_cast<std::uint16_t*>(at += qkv_bytes);
  auto* o16 = reinterpret_cast<std::uint16_t*>(at += p_bytes);
  if (packed) {
    pack(compute, qkv, qkv16, qkv_n);  // exact
    pack(compute, p, p16, scores);     // exact: forward returned p rounded
    pack(compute, dctx, o16, out_n);   // rounded
  }
  const auto bytes = [](const void* x) { return static_cast<const char*>(x); };
  const HeadPointers ptr = carve_pointers(buf, n);
  const HeadLayout lay{packed ? bytes(qkv16) : bytes(qkv), packed ? bytes(p16) : bytes(p),
                       packed ? bytes(o16) : bytes(dctx), packed ? bytes(ds16) : bytes(ds), elem, nullptr, nullptr, dqkv,
                       ds, B, L, H, hd, group};
  head_pointers<<<(n + 255) / 256, 256, 0, stream_>>>(lay, ptr);
  CUDA_CHECK_LAUNCH();
  for (int b0 = 0; b0 < B; b0 += group) {
    const int i0 = b0 * H, heads = std::min(group, B - b0) * H;
    const std::size_t group_scores = std::size_t(heads) * L * L;
    gemm_batched(cublas(), compute, Trans::yes, Trans::no, L, hd, L, 1.0f, ptr.p + i0, L, ptr.o + i0, D, ptr.dv + i0,
                 3 * D, heads);
    gemm_batched(cublas(), compute, Trans::no, Trans::yes, L, L, hd, 1.0f, ptr.o + i0, D, ptr.v + i0, 3 * D,
                 ptr.ds + i0, L, heads);
    const std::size_t rows = std::size_t(heads) * L;
    softmax_backward<<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(ds, p + std::size_t(i0) * L * L,
                                                                                   L, rows);
    CUDA_CHECK_LAUNCH();
    if (packed) pack(compute, ds, ds16, group_scores);  // rounded
    gemm_batched(cublas(), compute, Trans::no, Trans::no, L, hd, L, scale, ptr.ds_in + i0, L, ptr.k + i0, 3 * D,
                 ptr.dq + i0, 3 * D, heads);
    gemm_batched(cublas(), compute, Trans::yes, Trans::no, L, hd, L, scale, ptr.ds_in + i0, L, ptr.q + i0, 3 * D,
                 ptr.dk + i0, 3 * D, heads);
  }
}

}  // namespace avtrain::cuda
