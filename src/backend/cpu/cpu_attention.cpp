// Head layout changes and the masked softmax of attention.
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/vector_math.hpp"

namespace avtrain {

void CpuBackend::split_heads(const float* qkv, float* q, float* k, float* v, int B, int L, int H,
                             int hd) {
  const int D = H * hd;
  float* out[3] = {q, k, v};
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l)
      for (int s = 0; s < 3; ++s)
        for (int h = 0; h < H; ++h)
          std::memcpy(out[s] + ((std::size_t(b) * H + h) * L + l) * hd,
                      qkv + (std::size_t(b) * L + l) * 3 * D + s * D + h * hd, hd * sizeof(float));
}

void CpuBackend::merge_heads_grad(const float* dq, const float* dk, const float* dv, float* dqkv, int B,
                                  int L, int H, int hd) {
  const int D = H * hd;
  const float* in[3] = {dq, dk, dv};
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l)
      for (int s = 0; s < 3; ++s)
        for (int h = 0; h < H; ++h)
          std::memcpy(dqkv + (std::size_t(b) * L + l) * 3 * D + s * D + h * hd,
                      in[s] + ((std::size_t(b) * H + h) * L + l) * hd, hd * sizeof(float));
}

void CpuBackend::heads_to_tokens(const float* o, float* y, int B, int L, int H, int hd) {
  const int D = H * hd;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h)
        std::memcpy(y + (std::size_t(b) * L + l) * D + h * hd, o + ((std::size_t(b) * H + h) * L + l) * hd,
                    hd * sizeof(float));
}

void CpuBackend::tokens_to_heads(const float* y, float* o, int B, int L, int H, int hd) {
  const int D = H * hd;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h)
        std::memcpy(o + ((std::size_t(b) * H + h) * L + l) * hd, y + (std::size_t(b) * L + l) * D + h * hd,
                    hd * sizeof(float));
}

void CpuBackend::masked_softmax_forward(float* s, const std::uint8_t* key_mask, int B, int H, int L) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int hl = 0; hl < H * L; ++hl) {
      const std::uint8_t* mask = key_mask + std::size_t(b) * L;
      float* row = s + (std::size_t(b) * H * L + hl) * L;
      float m = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < L; ++j)
        if (mask[j] && row[j] > m) m = row[j];
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < L; ++j) {
        float e = mask[j] ? vmath::exp(row[j] - m) : 0.0f;
        row[j] = e;
        sum += e;
      }
      float inv = sum > 0 ? 1.0f / sum : 0.0f;
      for (int j = 0; j < L; ++j) row[j] *= inv;
    }
  }
}

void CpuBackend::softmax_backward(float* dp, const float* p, int rows, int L) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    float* d = dp + std::size_t(r) * L;
    const float* pr = p + std::size_t(r) * L;
    float dot = 0;
    for (int j = 0; j < L; ++j) dot += d[j] * pr[j];
    for (int j = 0; j < L; ++j) d[j] = pr[j] * (d[j] - dot);
  }
}

}  // namespace avtrain
