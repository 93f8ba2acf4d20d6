// Token assembly: embeddings, masks, pooling, column concatenation.
#include <cstring>

#include "backend/cpu/cpu_backend.hpp"

namespace avtrain {

void CpuBackend::mask_rows(float* x, const std::uint8_t* row_mask, int rows, int dim) {
  for (int r = 0; r < rows; ++r)
    if (!row_mask[r]) std::memset(x + std::size_t(r) * dim, 0, sizeof(float) * dim);
}

void CpuBackend::gather_rows(const float* x, const std::int32_t* index, float* y, int rows, int cols) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    float* out = y + std::size_t(r) * cols;
    if (index[r] < 0) std::memset(out, 0, sizeof(float) * cols);
    else std::memcpy(out, x + std::size_t(index[r]) * cols, sizeof(float) * cols);
  }
}

void CpuBackend::scatter_rows(const float* x, const std::int32_t* index, float* y, int rows, int cols) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r)
    if (index[r] >= 0) std::memcpy(y + std::size_t(index[r]) * cols, x + std::size_t(r) * cols, sizeof(float) * cols);
}

void CpuBackend::transpose_blocks(const void* x, void* y, int n0, int n1, std::size_t block_bytes) {
  const auto* in = static_cast<const unsigned char*>(x);
  auto* out = static_cast<unsigned char*>(y);
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < n0; ++i)
    for (int j = 0; j < n1; ++j)
      std::memcpy(out + (std::size_t(j) * n0 + i) * block_bytes, in + (std::size_t(i) * n1 + j) * block_bytes,
                  block_bytes);
}

void CpuBackend::embed_forward(const float* a, const float* v, const float* pos, const float* modality,
                               float* x, int B, int Ta, int L, int D) {
  const int Tv = L - Ta;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l) {
      const float* src = l < Ta ? a + (std::size_t(b) * Ta + l) * D : v + (std::size_t(b) * Tv + l - Ta) * D;
      const float* mod = modality + (l < Ta ? 0 : D);
      const float* p = pos + std::size_t(l) * D;
      float* dst = x + (std::size_t(b) * L + l) * D;
      for (int i = 0; i < D; ++i) dst[i] = src[i] + p[i] + mod[i];
    }
}

void CpuBackend::embed_backward(const float* dx, float* da, float* dv, float* dpos, float* dmodality,
                                int B, int Ta, int L, int D) {
  const int Tv = L - Ta;
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l) {
      const float* src = dx + (std::size_t(b) * L + l) * D;
      float* dst = l < Ta ? da + (std::size_t(b) * Ta + l) * D : dv + (std::size_t(b) * Tv + l - Ta) * D;
      float* dmod = dmodality + (l < Ta ? 0 : D);
      float* dp = dpos + std::size_t(l) * D;
      for (int i = 0; i < D; ++i) {
        dst[i] = src[i];
        dp[i] += src[i];
        dmod[i] += src[i];
      }
    }
}

void CpuBackend::masked_mean_pool_forward(const float* x, const std::uint8_t* mask, const float* counts,
                                          float* pooled, int B, int L, int D, int begin, int end) {
  for (int b = 0; b < B; ++b) {
    float* out = pooled + std::size_t(b) * D;
    std::memset(out, 0, sizeof(float) * D);
    int count = 0;
    for (int l = begin; l < end; ++l) {
      if (!mask[std::size_t(b) * L + l]) continue;
      ++count;
      const float* xr = x + (std::size_t(b) * L + l) * D;
      for (int i = 0; i < D; ++i) out[i] += xr[i];
    }
    const float over = counts ? counts[b] : float(count);
    float inv = over > 0 ? 1.0f / over : 0.0f;
    for (int i = 0; i < D; ++i) out[i] *= inv;
  }
}

void CpuBackend::masked_mean_pool_backward(const float* dpooled, const std::uint8_t* mask, const float* counts,
                                           float* dx, int B, int L, int D, int begin, int end) {
  for (int b = 0; b < B; ++b) {
    int count = 0;
    for (int l = begin; l < end; ++l) count += mask[std::size_t(b) * L + l] != 0;
    const float over = counts ? counts[b] : float(count);
    if (count == 0 || over <= 0) continue;
    float inv = 1.0f / over;
    const float* g = dpooled + std::size_t(b) * D;
    for (int l = begin; l < end; ++l) {
      if (!mask[std::size_t(b) * L + l]) continue;
      float* dr = dx + (std::size_t(b) * L + l) * D;
      for (int i = 0; i < D; ++i) dr[i] += g[i] * inv;
    }
  }
}

void CpuBackend::concat_columns(const float* a, const float* b, float* out, int B, int Da, int Db) {
  for (int r = 0; r < B; ++r) {
    std::memcpy(out + std::size_t(r) * (Da + Db), a + std::size_t(r) * Da, sizeof(float) * Da);
    std::memcpy(out + std::size_t(r) * (Da + Db) + Da, b + std::size_t(r) * Db, sizeof(float) * Db);
  }
}

void CpuBackend::split_columns(const float* d, float* da, float* db, int B, int Da, int Db) {
  for (int r = 0; r < B; ++r) {
    std::memcpy(da + std::size_t(r) * Da, d + std::size_t(r) * (Da + Db), sizeof(float) * Da);
    std::memcpy(db + std::size_t(r) * Db, d + std::size_t(r) * (Da + Db) + Da, sizeof(float) * Db);
  }
}

}  // namespace avtrain
