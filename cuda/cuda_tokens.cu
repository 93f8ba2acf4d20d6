// Token assembly: embeddings, masks, pooling, column concatenation, and the rows and blocks context
// parallelism moves. Every sum over samples or tokens is a loop in a fixed order inside one thread,
// so the gradients are the same every run.
#include <algorithm>
#include <cstdint>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

__global__ void mask_rows_kernel(float* x, const std::uint8_t* row_mask, int dim, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride())
    if (!row_mask[e / dim]) x[e] = 0.0f;
}

// The row of a (l < Ta) or v (l >= Ta) that token l of sample b comes from.
__device__ std::size_t source_row(std::size_t b, int l, int Ta, int L) {
  return l < Ta ? b * Ta + l : b * (L - Ta) + (l - Ta);
}

__global__ void embed_forward_kernel(const float* a, const float* v, const float* pos, const float* modality,
                                     float* x, int Ta, int L, int D, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const int i = int(e % D), l = int(e / D % L);
    const std::size_t b = e / D / L;
    const float* src = l < Ta ? a : v;
    x[e] = src[source_row(b, l, Ta, L) * D + i] + pos[std::size_t(l) * D + i] + modality[(l < Ta ? 0 : D) + i];
  }
}

__global__ void embed_split_kernel(const float* dx, float* da, float* dv, int Ta, int L, int D, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const int i = int(e % D), l = int(e / D % L);
    const std::size_t b = e / D / L;
    (l < Ta ? da : dv)[source_row(b, l, Ta, L) * D + i] = dx[e];
  }
}

// token_sum[l, i] = sum over samples b (in order) of dx[b, l, i]; dpos += it.
__global__ void embed_dpos_kernel(const float* dx, float* dpos, float* token_sum, int B, int L, int D) {
  const std::size_t per_sample = std::size_t(L) * D;
  for (std::size_t e = first_index(); e < per_sample; e += grid_stride()) {
    float s = 0;
    for (int b = 0; b < B; ++b) s += dx[b * per_sample + e];
    token_sum[e] = s;
    dpos[e] += s;
  }
}

// dmodality[m, i] += sum over the tokens of modality m (in order) of token_sum[l, i].
__global__ void embed_dmodality_kernel(const float* token_sum, float* dmodality, int Ta, int L, int D) {
  for (std::size_t e = first_index(); e < std::size_t(2) * D; e += grid_stride()) {
    const int m = int(e / D), i = int(e % D);
    const int l0 = m == 0 ? 0 : Ta, l1 = m == 0 ? Ta : L;
    if (l0 == l1) continue;
    float s = 0;
    for (int l = l0; l < l1; ++l) s += token_sum[std::size_t(l) * D + i];
    dmodality[e] += s;
  }
}

__device__ int count_tokens(const std::uint8_t* mask_b, int begin, int end) {
  int count = 0;
  for (int l = begin; l < end; ++l) count += mask_b[l] != 0;
  return count;
}

__global__ void pool_forward_kernel(const float* x, const std::uint8_t* mask, const float* counts, float* pooled, int L,
                                    int D, int begin, int end, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const std::size_t b = e / D;
    const int i = int(e % D);
    const std::uint8_t* mask_b = mask + b * L;
    float s = 0;
    for (int l = begin; l < end; ++l)
      if (mask_b[l]) s += x[(b * L + l) * D + i];
    const float over = counts ? counts[b] : float(count_tokens(mask_b, begin, end));
    pooled[e] = s * (over > 0 ? 1.0f / over : 0.0f);
  }
}

// A sample's count: the mask's, or the one given (its tokens over every part, parallel.cp).
__global__ void pool_counts_kernel(const std::uint8_t* mask, const float* given, float* counts, int B, int L, int begin,
                                   int end) {
  for (std::size_t b = first_index(); b < std::size_t(B); b += grid_stride())
    counts[b] = given ? given[b] : float(count_tokens(mask + b * L, begin, end));
}

__global__ void pool_backward_kernel(const float* dpooled, const std::uint8_t* mask, const float* counts, float* dx,
                                     int L, int D, int begin, int end, std::size_t n) {
  const int span = end - begin;
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const int i = int(e % D), l = begin + int(e / D % span);
    const std::size_t b = e / D / span;
    if (!mask[b * L + l] || counts[b] <= 0) continue;
    dx[(b * L + l) * D + i] += dpooled[b * D + i] * (1.0f / counts[b]);
  }
}

// y[r, :] = x[index[r], :], or zeros where index[r] < 0.
__global__ void gather_rows_kernel(const float* x, const std::int32_t* index, float* y, int cols, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const std::int32_t from = index[e / cols];
    y[e] = from < 0 ? 0.0f : x[std::size_t(from) * cols + e % cols];
  }
}

// y[index[r], :] = x[r, :] where index[r] >= 0.
__global__ void scatter_rows_kernel(const float* x, const std::int32_t* index, float* y, int cols, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const std::int32_t to = index[e / cols];
    if (to >= 0) y[std::size_t(to) * cols + e % cols] = x[e];
  }
}

// x as [n0, n1] blocks of `words` Words each; y[j, i] = x[i, j]. One thread per word of y, in y's
// order: the writes are coalesced, and so are the reads within a block.
template <typename Word>
__global__ void transpose_blocks_kernel(const Word* x, Word* y, int n0, int n1, std::size_t words, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const std::size_t block = e / words, k = e % words;
    const std::size_t j = block / n0, i = block % n0;
    y[e] = x[(i * n1 + j) * words + k];
  }
}

template <typename Word>
void launch_transpose(const void* x, void* y, int n0, int n1, std::size_t block_bytes, cudaStream_t s) {
  const std::size_t words = block_bytes / sizeof(Word), n = std::size_t(n0) * n1 * words;
  transpose_blocks_kernel<Word><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const Word*>(x), static_cast<Word*>(y),
                                                                  n0, n1, words, n);
  CUDA_CHECK_LAUNCH();
}

// dst[rows, dst_pitch] columns [0, cols) <- src[rows, src_pitch] columns [0, cols), on the stream.
void copy_columns(float* dst, int dst_pitch, const float* src, int src_pitch, int rows, int cols, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  CUDA_CHECK(cudaMemcpy2DAsync(dst, sizeof(float) * dst_pitch, src, sizeof(float) * src_pitch, sizeof(float) * cols,
                               rows, cudaMemcpyDeviceToDevice, s));
}

}  // namespace

void CudaBackend::mask_rows(float* x, const std::uint8_t* row_mask, int rows, int dim) {
  const std::size_t n = std::size_t(std::max(rows, 0)) * std::max(dim, 0);
  if (n == 0) return;
  mask_rows_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, row_mask, dim, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::gather_rows(const float* x, const std::int32_t* index, float* y, int rows, int cols) {
  const std::size_t n = std::size_t(std::max(rows, 0)) * std::max(cols, 0);
  if (n == 0) return;
  gather_rows_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, index, y, cols, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::scatter_rows(const float* x, const std::int32_t* index, float* y, int rows, int cols) {
  const std::size_t n = std::size_t(std::max(rows, 0)) * std::max(cols, 0);
  if (n == 0) return;
  scatter_rows_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, index, y, cols, n);
  CUDA_CHECK_LAUNCH();
}

// The widest word (16, 8, 4, 2 or 1 bytes) that divides the block and both buffers' addresses.
void CudaBackend::transpose_blocks(const void* x, void* y, int n0, int n1, std::size_t block_bytes) {
  if (n0 <= 0 || n1 <= 0 || block_bytes == 0) return;
  const std::uintptr_t alignment = reinterpret_cast<std::uintptr_t>(x) | reinterpret_cast<std::uintptr_t>(y) | block_bytes;
  if (alignment % 16 == 0) launch_transpose<uint4>(x, y, n0, n1, block_bytes, stream_);
  else if (alignment % 8 == 0) launch_transpose<uint2>(x, y, n0, n1, block_bytes, stream_);
  else if (alignment % 4 == 0) launch_transpose<std::uint32_t>(x, y, n0, n1, block_bytes, stream_);
  else if (alignment % 2 == 0) launch_transpose<std::uint16_t>(x, y, n0, n1, block_bytes, stream_);
  else launch_transpose<std::uint8_t>(x, y, n0, n1, block_bytes, stream_);
}

void CudaBackend::embed_forward(const float* a, const float* v, const float* pos, const float* modality, float* x,
                                int B, int Ta, int L, int D) {
  const std::size_t n = std::size_t(std::max(B, 0)) * std::max(L, 0) * std::max(D, 0);
  if (n == 0) return;
  embed_forward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(a, v, pos, modality, x, Ta, L, D, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::embed_backward(const float* dx, float* da, float* dv, float* dpos, float* dmodality, int B, int Ta,
                                 int L, int D) {
  const std::size_t per_sample = std::size_t(std::max(L, 0)) * std::max(D, 0);
  if (B <= 0 || per_sample == 0) return;
  embed_split_kernel<<<blocks_for(per_sample * B), kThreads, 0, stream_>>>(dx, da, dv, Ta, L, D, per_sample * B);
  CUDA_CHECK_LAUNCH();
  float* token_sum = static_cast<float*>(scratch(sizeof(float) * per_sample));
  embed_dpos_kernel<<<blocks_for(per_sample), kThreads, 0, stream_>>>(dx, dpos, token_sum, B, L, D);
  CUDA_CHECK_LAUNCH();
  embed_dmodality_kernel<<<blocks_for(std::size_t(2) * D), kThreads, 0, stream_>>>(token_sum, dmodality, Ta, L, D);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::masked_mean_pool_forward(const float* x, const std::uint8_t* mask, const float* counts, float* pooled,
                                           int B, int L, int D, int begin, int end) {
  const std::size_t n = std::size_t(std::max(B, 0)) * std::max(D, 0);
  if (n == 0) return;
  pool_forward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, mask, counts, pooled, L, D, begin, end, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::masked_mean_pool_backward(const float* dpooled, const std::uint8_t* mask, const float* given,
                                            float* dx, int B, int L, int D, int begin, int end) {
  const std::size_t n = std::size_t(std::max(B, 0)) * std::max(end - begin, 0) * std::max(D, 0);
  if (n == 0) return;
  float* counts = static_cast<float*>(scratch(sizeof(float) * B));
  pool_counts_kernel<<<blocks_for(B), kThreads, 0, stream_>>>(mask, given, counts, B, L, begin, end);
  CUDA_CHECK_LAUNCH();
  pool_backward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(dpooled, mask, counts, dx, L, D, begin, end, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::concat_columns(const float* a, const float* b, float* out, int B, int Da, int Db) {
  copy_columns(out, Da + Db, a, Da, B, Da, stream_);
  copy_columns(out + std::max(Da, 0), Da + Db, b, Db, B, Db, stream_);
}

void CudaBackend::split_columns(const float* d, float* da, float* db, int B, int Da, int Db) {
  copy_columns(da, Da, d, Da + Db, B, Da, stream_);
  copy_columns(db, Db, d + std::max(Da, 0), Da + Db, B, Db, stream_);
}

}  // namespace avtrain::cuda
