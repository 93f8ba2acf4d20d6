// Fused attention (FlashAttention-2's algorithm) for fp16/bf16 products on tensor cores, sm_80 on:
// no L x L tensor is written to memory. Used when device.fused is on (CudaBackend::fuses_attention).
//
// Forward, one block per (64 queries, sample, head), a warp per 16 queries: the block's q rows stay in
// shared memory while k, v stream through it in tiles of 64 keys; each tile's scores S = scale q k^T
// (fp32 accumulation), the running row maximum m and sum l of exp(S - m) over the valid keys, P =
// exp(S - m) rounded to the compute type, and O = O * exp(m_old - m) + P v. At the end ctx = O / l and
// the row statistics (m, 1 / l): what the unfused path writes, which backward recomputes p from.
//
// Backward, deterministic (no atomics): a row pass first gives each query row dot(dO, O) (O: forward's
// output as the layer kept it); then one kernel per (64 keys, sample, head) streams q, dO to sum
// dK = scale dS^T q and dV = P^T dO in registers, and one per (64 queries, sample, head) streams k, v
// to sum dQ = scale dS k, each recomputing P = exp(S - m) / l (rounded) and dS = P (dP - dot), rounded,
// with dP = dO v^T. Every sum has one order, so a run repeats bit for bit.
//
// q, k, v are read where the qkv projection wrote them ([B, L, 3, H, hd], 16-bit), ctx written where the
// output projection reads it ([B, L, H * hd]), dqkv in qkv's layout: no head-layout copies. ctx and dqkv
// are written in fp32 or, for the layers that keep only their 16-bit copies (copy_only outputs of
// attention_forward and attention_backward), as 16-bit patterns rounded in the epilogues (store_out): each dK, dV and dQ
// row is summed whole in one block's registers, so no fp32 scratch and no rounding pass are needed. The tensor
// core products go through WMMA fragments (16 x 16 x 16, fp32 accumulators) on padded shared-memory
// tiles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "flash_attention_layout.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

namespace wmma = nvcuda::wmma;

using flash::BackwardLayout;
using flash::ForwardLayout;
using flash::kLdP;
using flash::kLdS;
using flash::kTile;
using flash::kWarps;
constexpr int kThreadsPerBlock = kWarps * kWarp;

template <DType T>
struct Element;
template <>
struct Element<DType::f16> {
  using type = half;
};
template <>
struct Element<DType::bf16> {
  using type = __nv_bfloat16;
};

template <DType T>
__device__ std::uint16_t to_16(float v) {
  if constexpr (T == DType::bf16) return float_to_bf16(v);
  else return float_to_half(v);
}
template <DType T>
__device__ float from_16(std::uint16_t h) {
  if constexpr (T == DType::bf16) return bf16_to_float(h);
  else return half_to_float(h);
}

// An output element: fp32 as it is, or (Out = std::uint16_t: the layers' 16-bit copies alone) its
// pattern in T, rounded to nearest even as round_to would round the fp32 value: the same bits.
template <DType T, typename Out>
__device__ void store_out(Out* at, float v) {
  if constexpr (std::is_same_v<Out, float>) *at = v;
  else *at = to_16<T>(v);
}

using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
template <DType T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, typename Element<T>::type, wmma::row_major>;
template <DType T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, typename Element<T>::type, wmma::row_major>;
template <DType T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, typename Element<T>::type, wmma::col_major>;

template <DType T>
__device__ const typename Element<T>::type* as_elem(const std::uint16_t* p) {
  return reinterpret_cast<const typename Element<T>::type*>(p);
}

// acc (16 x 16) += a (16 x K, row-major, lda) * b (K x 16), b row-major (ldb) or, with b_is_transposed,
// read as the transpose of a row-major (16 x K) tile: b[k][n] = bt[n * ldb + k].
template <DType T, int K, bool b_is_transposed>
__device__ void mma_tile(FragAcc& acc, const std::uint16_t* a, int lda, const std::uint16_t* b, int ldb) {
#pragma unroll
  for (int k = 0; k < K; k += 16) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, as_elem<T>(a + k), lda);
    if constexpr (b_is_transposed) {
      FragBCol<T> fb;
      wmma::load_matrix_sync(fb, as_elem<T>(b + k), ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    } else {
      FragBRow<T> fb;
      wmma::load_matrix_sync(fb, as_elem<T>(b + std::size_t(k) * ldb), ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
  }
}

// The block copies rows [row0, row0 + 64) of a 16-bit matrix (row stride `stride` elements, HD
// columns) into a shared tile of leading dimension ld, 16 bytes at a time; rows past `rows` are zeros.
template <int HD>
__device__ void load_tile(std::uint16_t* dst, int ld, const std::uint16_t* src, std::size_t stride, int row0,
                          int rows) {
  constexpr int chunks = HD / 8;
  for (int i = threadIdx.x; i < kTile * chunks; i += kThreadsPerBlock) {
    const int r = i / chunks, c = (i % chunks) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(src + std::size_t(row0 + r) * stride + c);
    *reinterpret_cast<uint4*>(dst + r * ld + c) = v;
  }
}

// The (sample, head) of a block (blockIdx.y = b * H + h): where its columns start in a tensor laid out
// as qkv ([B, L, 3, H, HD]: q, k, v at parts 0, 1, 2, row stride 3 H HD) and in one laid out as ctx
// ([B, L, H HD]: ctx, dO; row stride H HD).
template <int HD>
struct Head {
  int bh, b, D;
  std::size_t stride;  // qkv's row stride
  std::size_t at_qkv, at_rows;
  __device__ Head(int L, int H)
      : bh(blockIdx.y), b(blockIdx.y / H), D(H * HD), stride(std::size_t(3) * D),
        at_qkv(std::size_t(b) * L * stride + std::size_t(blockIdx.y % H) * HD),
        at_rows(std::size_t(b) * L * D + std::size_t(blockIdx.y % H) * HD) {}
  template <typename E>
  __device__ E* part(E* qkv, int which) const { return qkv + at_qkv + std::size_t(which) * D; }
  template <typename E>
  __device__ E* rows(E* x) const { return x + at_rows; }
};

// The mask of keys [k0, k0 + 64) of sample b; keys past L masked.
__device__ void load_key_mask(std::uint8_t* mask_s, const std::uint8_t* key_mask, int b, int L, int k0) {
  if (threadIdx.x < kTile)
    mask_s[threadIdx.x] = k0 + int(threadIdx.x) < L ? key_mask[std::size_t(b) * L + k0 + threadIdx.x] : 0;
}

template <DType T, int HD, typename Out>
__global__ void __launch_bounds__(kThreadsPerBlock)
    flash_forward_kernel(const std::uint16_t* qkv, const std::uint8_t* key_mask, Out* ctx, float* stats, int L, int H,
                         float scale) {
  using Lay = ForwardLayout<HD>;
  constexpr int ldh = Lay::ldh, ldo = Lay::ldo;
  extern __shared__ __align__(128) std::uint16_t smem[];
  std::uint16_t* q_s = smem + Lay::q;
  std::uint16_t* k_s = smem + Lay::k;
  std::uint16_t* v_s = smem + Lay::v;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* s_w = reinterpret_cast<float*>(smem + Lay::s) + warp * 16 * kLdS;
  std::uint16_t* p_w = smem + Lay::p + warp * 16 * kLdP;
  float* o_w = reinterpret_cast<float*>(smem + Lay::o) + warp * 16 * ldo;
  float* row_w = reinterpret_cast<float*>(smem + Lay::rows) + warp * 16;
  auto* mask_s = reinterpret_cast<std::uint8_t*>(smem + Lay::mask);

  const Head<HD> head(L, H);
  const int q0 = blockIdx.x * kTile;

  load_tile<HD>(q_s, ldh, head.part(qkv, 0), head.stride, q0, L);
  for (int i = lane; i < 16 * ldo; i += kWarp) o_w[i] = 0.0f;
  __syncthreads();
  // The warp's q rows stay in registers for every key tile.
  FragA<T> q_frag[HD / 16];
#pragma unroll
  for (int k = 0; k < HD / 16; ++k) wmma::load_matrix_sync(q_frag[k], as_elem<T>(q_s + warp * 16 * ldh + k * 16), ldh);
  // Lanes 2r and 2r + 1 keep row r's running statistics and share its columns.
  const int r = lane / 2, half_lane = lane % 2;
  float m_run = -INFINITY, l_run = 0.0f;

  for (int k0 = 0; k0 < L; k0 += kTile) {
    __syncthreads();  // every warp is done with the previous tile
    load_tile<HD>(k_s, ldh, head.part(qkv, 1), head.stride, k0, L);
    load_tile<HD>(v_s, ldh, head.part(qkv, 2), head.stride, k0, L);
    load_key_mask(mask_s, key_mask, head.b, L, k0);
    __syncthreads();
    // S = q k^T for this warp's 16 rows, fp32.
#pragma unroll
    for (int n = 0; n < kTile; n += 16) {
      FragAcc acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int k = 0; k < HD / 16; ++k) {
        FragBCol<T> kf;
        wmma::load_matrix_sync(kf, as_elem<T>(k_s + n * ldh + k * 16), ldh);
        wmma::mma_sync(acc, q_frag[k], kf, acc);
      }
      wmma::store_matrix_sync(s_w + n, acc, kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax over the valid keys of the tile; P = exp(S - m) rounded to the compute type.
    const float* srow = s_w + r * kLdS;
    float tile_max = -INFINITY;
    for (int c = half_lane; c < kTile; c += 2)
      if (mask_s[c]) tile_max = fmaxf(tile_max, srow[c] * scale);
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m_run, tile_max);
    const float alpha = m_new == -INFINITY ? 1.0f : expf(m_run - m_new);
    float sum = 0.0f;
    for (int c = half_lane; c < kTile; c += 2) {
      const float e = mask_s[c] && m_new != -INFINITY ? expf(srow[c] * scale - m_new) : 0.0f;
      p_w[r * kLdP + c] = to_16<T>(e);
      sum += e;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l_run = l_run * alpha + sum;
    m_run = m_new;
    // O *= exp(m_old - m_new) per row, skipped when no row's maximum moved (a multiply by 1 changes no
    // bit), as for most tiles once the first have set the maxima.
    if (__any_sync(0xffffffffu, alpha != 1.0f)) {
      if (half_lane == 0) row_w[r] = alpha;
      __syncwarp();
      for (int i = lane; i < 16 * HD; i += kWarp) o_w[(i / HD) * ldo + i % HD] *= row_w[i / HD];
    }
    __syncwarp();
    // O += P v.
#pragma unroll
    for (int n = 0; n < HD; n += 16) {
      FragAcc acc;
      wmma::load_matrix_sync(acc, o_w + n, ldo, wmma::mem_row_major);
      mma_tile<T, kTile, false>(acc, p_w, kLdP, v_s + n, ldh);
      wmma::store_matrix_sync(o_w + n, acc, ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  // ctx = O / l; a row without a valid key is 0 with statistics (-inf, 0), as the unfused path's.
  const float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;
  if (half_lane == 0) row_w[r] = inv;
  const int q_row = q0 + warp * 16 + r;
  if (stats && half_lane == 0 && q_row < L) {
    const std::size_t at = std::size_t(head.bh) * L + q_row;
    stats[2 * at] = m_run;
    stats[2 * at + 1] = inv;
  }
  __syncwarp();
  for (int i = lane; i < 16 * HD; i += kWarp) {
    const int row = i / HD, c = i % HD, q = q0 + warp * 16 + row;
    if (q < L) store_out<T>(head.rows(ctx) + std::size_t(q) * head.D + c, o_w[row * ldo + c] * row_w[row]);
  }
}

// dot[b, h, l] = sum over the head's columns of dO (packed) * O (forward's output, 16-bit or fp32).
template <DType T>
__global__ void row_dot_kernel(const std::uint16_t* dout, const std::uint16_t* out16, const float* out32, float* dot,
                               int L, int H, int hd, std::size_t rows) {
  const std::size_t row = std::size_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;  // (b, l, h)
  if (row >= rows) return;
  const std::size_t at = row * hd;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < hd; c += kWarp)
    sum += from_16<T>(dout[at + c]) * (out16 ? from_16<T>(out16[at + c]) : out32[at + c]);
  sum = warp_sum(sum);
  if (threadIdx.x == 0) {
    const std::size_t h = row % H, bl = row / H, b = bl / L, l = bl % L;
    dot[(b * H + h) * L + l] = sum;
  }
}

// That memory, carved; the warp's own tiles for the calling warp.
template <int HD>
struct BackwardTiles {
  using Lay = BackwardLayout<HD>;
  std::uint16_t *own_a, *own_b, *tile_a, *tile_b, *p_w, *ds_w;
  float *s_w, *m, *inv, *dot;
  std::uint8_t* mask;
  __device__ explicit BackwardTiles(std::uint16_t* smem) {
    const int warp = threadIdx.x / kWarp;
    own_a = smem + Lay::own_a;
    own_b = smem + Lay::own_b;
    tile_a = smem + Lay::tile_a;
    tile_b = smem + Lay::tile_b;
    s_w = reinterpret_cast<float*>(smem + Lay::s) + warp * 16 * kLdS;
    p_w = smem + Lay::p + warp * 16 * kLdP;
    ds_w = smem + Lay::ds + warp * 16 * kLdP;
    m = reinterpret_cast<float*>(smem + Lay::numbers);
    inv = m + kTile;
    dot = inv + kTile;
    mask = reinterpret_cast<std::uint8_t*>(smem + Lay::mask);
  }
};

// The numbers of query rows [q0, q0 + 64) of (sample, head) bh: m and 1 / l from forward's row
// statistics and dot(dO, O); rows past L get 1 / l = 0, so their p is 0.
template <int HD>
__device__ void load_query_numbers(const BackwardTiles<HD>& t, const float* stats, const float* dot, int bh, int L,
                                   int q0) {
  if (threadIdx.x >= kTile) return;
  const int q = q0 + threadIdx.x;
  const std::size_t at = std::size_t(bh) * L + q;
  const bool in = q < L;
  t.m[threadIdx.x] = in ? stats[2 * at] : 0.0f;
  t.inv[threadIdx.x] = in ? stats[2 * at + 1] : 0.0f;
  t.dot[threadIdx.x] = in ? dot[at] : 0.0f;
}

// s_w (16 x 64, fp32) = the warp's 16 rows of a times the 64 rows of the tile b, transposed.
template <DType T, int HD>
__device__ void rows_by_tile(float* s_w, const std::uint16_t* a_rows, const std::uint16_t* b_tile) {
  constexpr int ldh = HD + 8;
#pragma unroll
  for (int n = 0; n < kTile; n += 16) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_tile<T, HD, true>(acc, a_rows, ldh, b_tile + n * ldh, ldh);
    wmma::store_matrix_sync(s_w + n, acc, kLdS, wmma::mem_row_major);
  }
  __syncwarp();
}

// Element (r, c) of the warp's 16 x 64 tile: its query (a row of the numbers) and whether its key is
// valid. dK, dV work S^T (keys are the warp's rows, queries the columns); dQ works S.
template <bool kQueriesAreColumns>
struct TileIndex {
  int query;
  bool valid;
  template <int HD>
  __device__ TileIndex(const BackwardTiles<HD>& t, int r, int c) {
    const int warp_row = threadIdx.x / kWarp * 16 + r;
    query = kQueriesAreColumns ? c : warp_row;
    valid = t.mask[kQueriesAreColumns ? warp_row : c] != 0;
  }
};

// p_w = P = exp(scale S - m) / l over valid keys, rounded as forward's kept P would be, from s_w.
template <DType T, bool kQueriesAreColumns, int HD>
__device__ void tile_probabilities(const BackwardTiles<HD>& t, float scale) {
  for (int i = threadIdx.x % kWarp; i < 16 * kTile; i += kWarp) {
    const int r = i / kTile, c = i % kTile;
    const TileIndex<kQueriesAreColumns> at(t, r, c);
    const float inv = t.inv[at.query];
    const float p = at.valid && inv > 0.0f ? expf(t.s_w[r * kLdS + c] * scale - t.m[at.query]) * inv : 0.0f;
    t.p_w[r * kLdP + c] = to_16<T>(p);
  }
  __syncwarp();
}

// ds_w = dS = P (dP - dot), rounded, with dP in s_w.
template <DType T, bool kQueriesAreColumns, int HD>
__device__ void tile_score_gradients(const BackwardTiles<HD>& t) {
  for (int i = threadIdx.x % kWarp; i < 16 * kTile; i += kWarp) {
    const int r = i / kTile, c = i % kTile;
    const TileIndex<kQueriesAreColumns> at(t, r, c);
    t.ds_w[r * kLdP + c] = to_16<T>(from_16<T>(t.p_w[r * kLdP + c]) * (t.s_w[r * kLdS + c] - t.dot[at.query]));
  }
  __syncwarp();
}

// The warp's 16 x HD accumulators, scaled, to rows [row0, row0 + 16) of a matrix of row stride
// `stride` (rows past `rows` left alone), through the warp's fp32 tile; fp32 or 16-bit (store_out).
template <DType T, int HD, typename Out>
__device__ void store_rows(const FragAcc (&acc)[HD / 16], float* s_w, float scale, Out* out, std::size_t stride,
                           int row0, int rows) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) {
    wmma::store_matrix_sync(s_w, acc[n], kLdS, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 256; i += kWarp) {
      const int r = i / 16, c = i % 16;
      if (row0 + r < rows) store_out<T>(out + std::size_t(row0 + r) * stride + n * 16 + c, s_w[r * kLdS + c] * scale);
    }
    __syncwarp();
  }
}

// dK and dV of 64 keys (own: k, v): q and dO stream by (tiles: q, dO) in tiles of 64 queries.
template <DType T, int HD, typename Out>
__global__ void __launch_bounds__(kThreadsPerBlock)
    flash_dkdv_kernel(const std::uint16_t* qkv, const std::uint16_t* dout, const std::uint8_t* key_mask,
                      const float* stats, const float* dot, Out* dqkv, int L, int H, float scale) {
  constexpr int ldh = BackwardLayout<HD>::ldh;
  extern __shared__ __align__(128) std::uint16_t smem[];
  const BackwardTiles<HD> t(smem);
  const int warp = threadIdx.x / kWarp;
  const Head<HD> head(L, H);
  const int k0 = blockIdx.x * kTile;
  load_tile<HD>(t.own_a, ldh, head.part(qkv, 1), head.stride, k0, L);
  load_tile<HD>(t.own_b, ldh, head.part(qkv, 2), head.stride, k0, L);
  load_key_mask(t.mask, key_mask, head.b, L, k0);

  FragAcc dk[HD / 16], dv[HD / 16];
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);

  for (int q0 = 0; q0 < L; q0 += kTile) {
    __syncthreads();
    load_tile<HD>(t.tile_a, ldh, head.part(qkv, 0), head.stride, q0, L);
    load_tile<HD>(t.tile_b, ldh, head.rows(dout), head.D, q0, L);
    load_query_numbers(t, stats, dot, head.bh, L, q0);
    __syncthreads();
    rows_by_tile<T, HD>(t.s_w, t.own_a + warp * 16 * ldh, t.tile_a);  // S^T = k q^T
    tile_probabilities<T, true>(t, scale);                           // P^T
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) mma_tile<T, kTile, false>(dv[n], t.p_w, kLdP, t.tile_b + n * 16, ldh);  // dV += P^T dO
    rows_by_tile<T, HD>(t.s_w, t.own_b + warp * 16 * ldh, t.tile_b);  // dP^T = v dO^T
    tile_score_gradients<T, true>(t);                                // dS^T
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) mma_tile<T, kTile, false>(dk[n], t.ds_w, kLdP, t.tile_a + n * 16, ldh);  // dK += dS^T q
  }
  store_rows<T, HD>(dk, t.s_w, scale, head.part(dqkv, 1), head.stride, k0 + warp * 16, L);
  store_rows<T, HD>(dv, t.s_w, 1.0f, head.part(dqkv, 2), head.stride, k0 + warp * 16, L);
}

// dQ of 64 queries (own: q, dO): k and v stream by (tiles: k, v) in tiles of 64 keys.
template <DType T, int HD, typename Out>
__global__ void __launch_bounds__(kThreadsPerBlock)
    flash_dq_kernel(const std::uint16_t* qkv, const std::uint16_t* dout, const std::uint8_t* key_mask,
                    const float* stats, const float* dot, Out* dqkv, int L, int H, float scale) {
  constexpr int ldh = BackwardLayout<HD>::ldh;
  extern __shared__ __align__(128) std::uint16_t smem[];
  const BackwardTiles<HD> t(smem);
  const int warp = threadIdx.x / kWarp;
  const Head<HD> head(L, H);
  const int q0 = blockIdx.x * kTile;
  load_tile<HD>(t.own_a, ldh, head.part(qkv, 0), head.stride, q0, L);
  load_tile<HD>(t.own_b, ldh, head.rows(dout), head.D, q0, L);
  load_query_numbers(t, stats, dot, head.bh, L, q0);

  FragAcc dq[HD / 16];
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);

  for (int k0 = 0; k0 < L; k0 += kTile) {
    __syncthreads();
    load_tile<HD>(t.tile_a, ldh, head.part(qkv, 1), head.stride, k0, L);
    load_tile<HD>(t.tile_b, ldh, head.part(qkv, 2), head.stride, k0, L);
    load_key_mask(t.mask, key_mask, head.b, L, k0);
    __syncthreads();
    rows_by_tile<T, HD>(t.s_w, t.own_a + warp * 16 * ldh, t.tile_a);  // S = q k^T
    tile_probabilities<T, false>(t, scale);                          // P
    rows_by_tile<T, HD>(t.s_w, t.own_b + warp * 16 * ldh, t.tile_b);  // dP = dO v^T
    tile_score_gradients<T, false>(t);                               // dS
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) mma_tile<T, kTile, false>(dq[n], t.ds_w, kLdP, t.tile_a + n * 16, ldh);  // dQ += dS k
  }
  store_rows<T, HD>(dq, t.s_w, scale, head.part(dqkv, 0), head.stride, q0 + warp * 16, L);
}

// A kernel's dynamic shared memory past the default 48 KiB (an attribute of the function: set at each
// launch, a host-side call of a microsecond).
template <typename Kernel>
void allow_shared(Kernel kernel, std::size_t bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

struct FlashArgs {
  const std::uint16_t* qkv;
  const std::uint8_t* key_mask;
  int B, L, H;
  float scale;
  cudaStream_t stream;
};

template <DType T, int HD, typename Out>
void forward_for(const FlashArgs& a, Out* ctx, float* stats) {
  const std::size_t bytes = ForwardLayout<HD>::bytes;
  allow_shared(flash_forward_kernel<T, HD, Out>, bytes);
  const dim3 grid((a.L + kTile - 1) / kTile, a.B * a.H);
  flash_forward_kernel<T, HD, Out><<<grid, kThreadsPerBlock, bytes, a.stream>>>(a.qkv, a.key_mask, ctx, stats, a.L,
                                                                                a.H, a.scale);
  CUDA_CHECK_LAUNCH();
}

template <DType T, int HD, typename Out>
void backward_for(const FlashArgs& a, const std::uint16_t* dout, const float* stats, const float* dot, Out* dqkv) {
  const std::size_t bytes = BackwardLayout<HD>::bytes;
  allow_shared(flash_dkdv_kernel<T, HD, Out>, bytes);
  allow_shared(flash_dq_kernel<T, HD, Out>, bytes);
  const dim3 grid((a.L + kTile - 1) / kTile, a.B * a.H);
  flash_dkdv_kernel<T, HD, Out><<<grid, kThreadsPerBlock, bytes, a.stream>>>(a.qkv, dout, a.key_mask, stats, dot,
                                                                             dqkv, a.L, a.H, a.scale);
  CUDA_CHECK_LAUNCH();
  flash_dq_kernel<T, HD, Out><<<grid, kThreadsPerBlock, bytes, a.stream>>>(a.qkv, dout, a.key_mask, stats, dot, dqkv,
                                                                           a.L, a.H, a.scale);
  CUDA_CHECK_LAUNCH();
}

// The kernels of type T with fp32 outputs (out32) or 16-bit ones (out16): the one that is not null.
template <DType T, int HD>
void forward_into(const FlashArgs& a, float* ctx32, std::uint16_t* ctx16, float* stats) {
  if (ctx16) forward_for<T, HD>(a, ctx16, stats);
  else forward_for<T, HD>(a, ctx32, stats);
}
template <DType T, int HD>
void backward_into(const FlashArgs& a, const std::uint16_t* dout, const float* stats, const float* dot, float* dqkv32,
                   std::uint16_t* dqkv16) {
  if (dqkv16) backward_for<T, HD>(a, dout, stats, dot, dqkv16);
  else backward_for<T, HD>(a, dout, stats, dot, dqkv32);
}

// The head dimensions with a kernel (flash::has_kernel): multiples of 16 the tiles fit in shared memory with.
template <DType T, typename Run>
void by_head_dim(int hd, Run&& run) {
  switch (hd) {
    case 16: return run(std::integral_constant<int, 16>{});
    case 32: return run(std::integral_constant<int, 32>{});
    case 64: return run(std::integral_constant<int, 64>{});
    case 128: return run(std::integral_constant<int, 128>{});
    default: throw Error("internal: fused attention has no kernel for head dimension " + std::to_string(hd));
  }
}

}  // namespace

bool CudaBackend::fuses_attention(DType compute, int head_dim) const {
  return options_.fused && compute != DType::f32 && fused_attention_capable_ &&
         flash::fused_runs(head_dim, shared_optin_bytes_, cudnn_at_hand());
}

void CudaBackend::flash_forward(DType compute, const std::uint16_t* qkv, const std::uint8_t* key_mask, float* row_stats,
                                float* ctx, std::uint16_t* ctx16, int B, int L, int H, int hd) {
  const FlashArgs a{qkv, key_mask, B, L, H, 1.0f / std::sqrt(float(hd)), stream_};
  if (compute == DType::bf16)
    by_head_dim<DType::bf16>(hd, [&](auto HD) { forward_into<DType::bf16, decltype(HD)::value>(a, ctx, ctx16, row_stats); });
  else
    by_head_dim<DType::f16>(hd, [&](auto HD) { forward_into<DType::f16, decltype(HD)::value>(a, ctx, ctx16, row_stats); });
}

void CudaBackend::flash_backward(DType compute, const std::uint16_t* qkv, const std::uint8_t* key_mask,
                                 const float* row_stats, Operand out, const std::uint16_t* dout, float* dot, float* dqkv,
                                 std::uint16_t* dqkv16, int B, int L, int H, int hd) {
  const std::size_t rows = std::size_t(B) * L * H;
  const auto* out16 = out.dtype == DType::f32 ? nullptr : static_cast<const std::uint16_t*>(out.data);
  const auto* out32 = out.dtype == DType::f32 ? static_cast<const float*>(out.data) : nullptr;
  if (compute == DType::bf16)
    row_dot_kernel<DType::bf16><<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(dout, out16, out32, dot, L, H,
                                                                                             hd, rows);
  else
    row_dot_kernel<DType::f16><<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(dout, out16, out32, dot, L, H,
                                                                                            hd, rows);
  CUDA_CHECK_LAUNCH();
  const FlashArgs a{qkv, key_mask, B, L, H, 1.0f / std::sqrt(float(hd)), stream_};
  if (compute == DType::bf16)
    by_head_dim<DType::bf16>(hd, [&](auto HD) {
      backward_into<DType::bf16, decltype(HD)::value>(a, dout, row_stats, dot, dqkv, dqkv16);
    });
  else
    by_head_dim<DType::f16>(hd, [&](auto HD) {
      backward_into<DType::f16, decltype(HD)::value>(a, dout, row_stats, dot, dqkv, dqkv16);
    });
}

}  // namespace avtrain::cuda
