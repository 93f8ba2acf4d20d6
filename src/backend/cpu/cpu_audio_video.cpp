// Audio front-end pieces, 1-D im2col for Conv1d, and video tubelets.
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.hpp"

namespace avtrain {

void CpuBackend::frame_signal(const float* audio, const float* window, float* frames, int B,
                              std::int64_t A, int T, int win, int hop) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float* src = audio + std::size_t(b) * A + std::size_t(t) * hop;
      float* dst = frames + (std::size_t(b) * T + t) * win;
      for (int i = 0; i < win; ++i) dst[i] = src[i] * window[i];
    }
}

void CpuBackend::power_spectrum(const float* spec, float* power, int rows, int nb) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const float* re = spec + std::size_t(r) * 2 * nb;
    const float* im = re + nb;
    float* p = power + std::size_t(r) * nb;
    for (int k = 0; k < nb; ++k) p[k] = re[k] * re[k] + im[k] * im[k];
  }
}

void CpuBackend::masked_log(float* x, const std::uint8_t* row_mask, int rows, int cols, float eps) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    float* xr = x + std::size_t(r) * cols;
    for (int c = 0; c < cols; ++c) xr[c] = row_mask[r] ? std::log(xr[c] + eps) : 0.0f;
  }
}

void CpuBackend::im2col_1d(const float* x, float* col, int B, int T, int C, int k, int stride, int pad,
                           int To) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < To; ++t) {
      float* dst = col + (std::size_t(b) * To + t) * C * k;
      for (int j = 0; j < k; ++j) {
        int ti = t * stride + j - pad;
        bool inside = ti >= 0 && ti < T;
        const float* src = x + (std::size_t(b) * T + (inside ? ti : 0)) * C;
        for (int c = 0; c < C; ++c) dst[c * k + j] = inside ? src[c] : 0.0f;
      }
    }
}

void CpuBackend::col2im_1d(const float* dcol, float* dx, int B, int T, int C, int k, int stride,
                           int pad, int To) {
  std::memset(dx, 0, sizeof(float) * std::size_t(B) * T * C);
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < To; ++t) {
      const float* src = dcol + (std::size_t(b) * To + t) * C * k;
      for (int j = 0; j < k; ++j) {
        int ti = t * stride + j - pad;
        if (ti < 0 || ti >= T) continue;
        float* dst = dx + (std::size_t(b) * T + ti) * C;
        for (int c = 0; c < C; ++c) dst[c] += src[c * k + j];
      }
    }
}

void CpuBackend::video_patches(const std::uint8_t* video, float* patches, int B, int F, int H, int W,
                               int C, int tp, int p) {
  const int Nt = F / tp, Nh = H / p, Nw = W / p;
  const int P = tp * p * p * C;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int it = 0; it < Nt; ++it)
      for (int ih = 0; ih < Nh; ++ih)
        for (int iw = 0; iw < Nw; ++iw) {
          float* dst = patches + ((std::size_t(b) * Nt + it) * Nh * Nw + ih * Nw + iw) * P;
          int e = 0;
          for (int dt = 0; dt < tp; ++dt)
            for (int dy = 0; dy < p; ++dy) {
              const std::uint8_t* row =
                  video + (((std::size_t(b) * F + it * tp + dt) * H + ih * p + dy) * W + iw * p) * C;
              for (int i = 0; i < p * C; ++i) dst[e++] = row[i] * (1.0f / 127.5f) - 1.0f;
            }
        }
}

}  // namespace avtrain
