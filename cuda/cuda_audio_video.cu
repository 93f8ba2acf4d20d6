// Audio front-end pieces, 1-D im2col for Conv1d, and video tubelets: one thread per output element
// (grid-stride). col2im gathers each dx element's contributions in the CPU's order, so no atomics.
#include <algorithm>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

__global__ void frame_signal_kernel(const float* audio, const float* window, float* frames, std::int64_t A, int T,
                                    int win, int hop, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const int i = int(e % win);
    const std::size_t bt = e / win;
    const std::size_t b = bt / T, t = bt % T;
    frames[e] = audio[b * A + t * hop + i] * window[i];
  }
}

__global__ void power_spectrum_kernel(const float* spec, float* power, int nb, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const std::size_t r = e / nb, k = e % nb;
    const float re = spec[r * 2 * nb + k], im = spec[r * 2 * nb + nb + k];
    power[e] = re * re + im * im;
  }
}

__global__ void masked_log_kernel(float* x, const std::uint8_t* row_mask, int cols, float eps, std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride())
    x[e] = row_mask[e / cols] ? logf(x[e] + eps) : 0.0f;
}

// col[b, t, c*k + j] = x[b, t*stride + j - pad, c], 0 outside [0, T)
__global__ void im2col_kernel(const float* x, float* col, int T, int C, int k, int stride, int pad, int To,
                              std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const std::size_t ck = std::size_t(C) * k;
    const int c = int(e % ck / k), j = int(e % k);
    const std::size_t bt = e / ck;
    const std::size_t b = bt / To;
    const int ti = int(bt % To) * stride + j - pad;
    col[e] = ti >= 0 && ti < T ? x[(b * T + ti) * C + c] : 0.0f;
  }
}

// dx[b, ti, c] = sum over t ascending (j = ti + pad - t*stride in [0, k)) of dcol[b, t, c*k + j]
__global__ void col2im_kernel(const float* dcol, float* dx, int T, int C, int k, int stride, int pad, int To,
                              std::size_t n) {
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const int c = int(e % C);
    const std::size_t bti = e / C;
    const std::size_t b = bti / T;
    const int reach = int(bti % T) + pad;  // t*stride + j
    const int above = reach - k + 1;       // t*stride > reach - k
    const int t0 = above <= 0 ? 0 : (above + stride - 1) / stride;
    const int t1 = min(To - 1, reach < 0 ? -1 : reach / stride);
    float sum = 0;
    for (int t = t0; t <= t1; ++t)
      sum += dcol[((b * To + t) * C + c) * k + (reach - t * stride)];
    dx[e] = sum;
  }
}

// patches[b, (it*Nh + ih)*Nw + iw, ((dt*p + dy)*p + dx)*C + ch]
//   = video[b, it*tp + dt, ih*p + dy, iw*p + dx, ch] / 127.5 - 1
__global__ void video_patches_kernel(const std::uint8_t* video, float* patches, int F, int H, int W, int C, int tp,
                                     int p, std::size_t n) {
  const int Nh = H / p, Nw = W / p, Nt = F / tp;
  const std::size_t P = std::size_t(tp) * p * p * C;
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const std::size_t inner = e % P, patch = e / P;
    const int pc = p * C;
    const int i = int(inner % pc), dy = int(inner / pc % p), dt = int(inner / pc / p);
    const int iw = int(patch % Nw), ih = int(patch / Nw % Nh);
    const std::size_t it = patch / Nw / Nh % Nt, b = patch / Nw / Nh / Nt;
    const std::size_t frame = b * F + it * tp + dt;
    const std::uint8_t v = video[((frame * H + std::size_t(ih) * p + dy) * W + std::size_t(iw) * p) * C + i];
    patches[e] = __fmul_rn(float(v), 1.0f / 127.5f) - 1.0f;  // unfused, as the CPU rounds it
  }
}

}  // namespace

void CudaBackend::frame_signal(const float* audio, const float* window, float* frames, int B, std::int64_t A, int T,
                               int win, int hop) {
  const std::size_t n = std::size_t(std::max(B, 0)) * std::max(T, 0) * std::max(win, 0);
  if (n == 0) return;
  frame_signal_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(audio, window, frames, A, T, win, hop, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::power_spectrum(const float* spec, float* power, int rows, int nb) {
  const std::size_t n = std::size_t(std::max(rows, 0)) * std::max(nb, 0);
  if (n == 0) return;
  power_spectrum_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(spec, power, nb, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::masked_log(float* x, const std::uint8_t* row_mask, int rows, int cols, float eps) {
  const std::size_t n = std::size_t(std::max(rows, 0)) * std::max(cols, 0);
  if (n == 0) return;
  masked_log_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, row_mask, cols, eps, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::im2col_1d(const float* x, float* col, int B, int T, int C, int k, int stride, int pad, int To) {
  const std::size_t n = std::size_t(std::max(B, 0)) * std::max(To, 0) * std::max(C, 0) * std::max(k, 0);
  if (n == 0) return;
  im2col_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, col, T, C, k, stride, pad, To, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::col2im_1d(const float* dcol, float* dx, int B, int T, int C, int k, int stride, int pad, int To) {
  const std::size_t n = std::size_t(std::max(B, 0)) * std::max(T, 0) * std::max(C, 0);
  if (n == 0) return;
  col2im_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(dcol, dx, T, C, k, stride, pad, To, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::video_patches(const std::uint8_t* video, float* patches, int B, int F, int H, int W, int C, int tp,
                                int p) {
  if (tp <= 0 || p <= 0) return;
  const std::size_t tokens = std::size_t(std::max(B, 0)) * (F / tp) * (H / p) * (W / p);
  const std::size_t n = tokens * tp * p * p * std::max(C, 0);
  if (n == 0) return;
  video_patches_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(video, patches, F, H, W, C, tp, p, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace avtrain::cuda
