// LayerNorm (float statistics, one warp per row) and masked BatchNorm (double statistics over the
// rows with mask 1). Sums over rows (dgamma, dbeta, BatchNorm statistics) are deterministic: each
// block sums a fixed chunk of rows for 32 columns in a fixed tree, then one thread per column adds
// the chunks in order. No float atomics, so the results are the same every run.
#include <algorithm>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "elementwise_math.cuh"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

constexpr int kMaxChunks = 512;  // (kRowsPerBlock, from launch.cuh, is also the row lanes of the column sums)

// kSixteen false: y written in fp32; true: only y's patterns rounded to `type` into y16 (y unused), the
// bits round_to after the fp32 kernel gives (the same value, the same conversion).
template <bool kSixteen>
__global__ void layernorm_forward_kernel(const float* x, const float* gamma, const float* beta, float* y,
                                         float* mean, float* rstd, int rows, int dim, float eps, DType type,
                                         std::uint16_t* y16) {
  const int r = blockIdx.x * kRowsPerBlock + threadIdx.y;
  if (r >= rows) return;
  const float* xr = x + std::size_t(r) * dim;
  float* yr = kSixteen ? nullptr : y + std::size_t(r) * dim;
  float s = 0;
  for (int i = threadIdx.x; i < dim; i += kWarp) s += xr[i];
  const float mu = warp_sum(s) / dim;
  float v = 0;
  for (int i = threadIdx.x; i < dim; i += kWarp) v += (xr[i] - mu) * (xr[i] - mu);
  const float rs = 1.0f / sqrtf(warp_sum(v) / dim + eps);
  if constexpr (kSixteen) {
    std::uint16_t* y16r = y16 + std::size_t(r) * dim;
    for (int i = threadIdx.x; i < dim; i += kWarp) {
      const float value = (xr[i] - mu) * rs * gamma[i] + beta[i];
      round_in(type, value, y16r + i);
    }
  } else {
    for (int i = threadIdx.x; i < dim; i += kWarp) yr[i] = (xr[i] - mu) * rs * gamma[i] + beta[i];
  }
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

__global__ void layernorm_dx_kernel(const float* dy, Operand x, const float* gamma, const float* mean,
                                    const float* rstd, float* dx, int rows, int dim) {
  const int r = blockIdx.x * kRowsPerBlock + threadIdx.y;
  if (r >= rows) return;
  const std::size_t row = std::size_t(r) * dim;
  const float* dyr = dy + row;
  float* dxr = dx + row;
  const float mu = mean[r], rs = rstd[r];
  float sum_g = 0, sum_gx = 0;
  for (int i = threadIdx.x; i < dim; i += kWarp) {
    const float g = dyr[i] * gamma[i];
    sum_g += g;
    sum_gx += g * ((value_at(x, row + i) - mu) * rs);
  }
  const float mg = warp_sum(sum_g) / dim, mgx = warp_sum(sum_gx) / dim;
  for (int i = threadIdx.x; i < dim; i += kWarp) {
    const float xhat = (value_at(x, row + i) - mu) * rs;
    dxr[i] = rs * (dyr[i] * gamma[i] - mg - xhat * mgx);
  }
}

// Per (row, column) terms of the column sums; each adds its two terms to (a, b).
struct LayerNormParamTerms {
  const float* dy;
  Operand x;
  const float *mean, *rstd;
  int cols;
  __device__ void operator()(int r, int c, float& a, float& b) const {
    const std::size_t i = std::size_t(r) * cols + c;
    a += dy[i] * (value_at(x, i) - mean[r]) * rstd[r];
    b += dy[i];
  }
};

struct MaskedSum {
  const float* x;
  const std::uint8_t* mask;
  int cols;
  __device__ void operator()(int r, int c, double& a, double&) const {
    if (mask[r]) a += x[std::size_t(r) * cols + c];
  }
};

struct MaskedSquaredDeviation {
  const float* x;
  const std::uint8_t* mask;
  const double* mu;
  int cols;
  __device__ void operator()(int r, int c, double& a, double&) const {
    if (!mask[r]) return;
    const double d = x[std::size_t(r) * cols + c] - mu[c];
    a += d * d;
  }
};

struct BatchNormParamTerms {
  const float *dy, *x, *mean, *rstd;
  const std::uint8_t* mask;
  int cols;
  __device__ void operator()(int r, int c, double& a, double& b) const {
    if (!mask[r]) return;
    const std::size_t i = std::size_t(r) * cols + c;
    const float xhat = (x[i] - mean[c]) * rstd[c];
    a += double(dy[i]) * xhat;
    b += dy[i];
  }
};

// Rows split into fixed chunks; part_a/part_b[chunk, cols] get each chunk's column sums.
struct Chunks {
  int count, rows_each;
};

Chunks chunks_for(int rows) {
  const int count = std::max(1, std::min(kMaxChunks, (rows + 63) / 64));
  return {count, (rows + count - 1) / count};
}

template <typename T, typename Terms>
__global__ void column_partials(Terms terms, int rows, int cols, Chunks chunks, T* part_a, T* part_b) {
  __shared__ T sa[kRowsPerBlock][kWarp], sb[kRowsPerBlock][kWarp];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  const int r0 = blockIdx.y * chunks.rows_each;
  const int r1 = min(rows, r0 + chunks.rows_each);
  T a = 0, b = 0;
  if (c < cols)
    for (int r = r0 + threadIdx.y; r < r1; r += kRowsPerBlock) terms(r, c, a, b);
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int y = 1; y < kRowsPerBlock; ++y) {
    a += sa[y][threadIdx.x];
    b += sb[y][threadIdx.x];
  }
  part_a[std::size_t(blockIdx.y) * cols + c] = a;
  part_b[std::size_t(blockIdx.y) * cols + c] = b;
}

// sum_a/sum_b[c] = the chunks' partial sums added in chunk order.
template <typename T>
__global__ void sum_chunks(const T* part_a, const T* part_b, int chunks, int cols, T* sum_a, T* sum_b) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  T a = 0, b = 0;
  for (int k = 0; k < chunks; ++k) {
    a += part_a[std::size_t(k) * cols + c];
    b += part_b[std::size_t(k) * cols + c];
  }
  sum_a[c] = a;
  sum_b[c] = b;
}

template <typename T, typename Terms>
void column_sums(cudaStream_t stream, Terms terms, int rows, int cols, T* part, T* sum_a, T* sum_b) {
  const Chunks chunks = chunks_for(rows);
  T* part_b = part + std::size_t(chunks.count) * cols;
  const dim3 grid((cols + kWarp - 1) / kWarp, chunks.count);
  column_partials<T><<<grid, dim3(kWarp, kRowsPerBlock), 0, stream>>>(terms, rows, cols, chunks, part, part_b);
  CUDA_CHECK_LAUNCH();
  sum_chunks<T><<<(cols + 255) / 256, 256, 0, stream>>>(part, part_b, chunks.count, cols, sum_a, sum_b);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
std::size_t partial_bytes(int rows, int cols) {
  return 2 * sizeof(T) * std::size_t(chunks_for(rows).count) * cols;
}

__global__ void accumulate_params(const float* dg, const float* db, float* dgamma, float* dbeta, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  dgamma[c] += dg[c];
  dbeta[c] += db[c];
}

// count[0] = the number of rows with mask 1 (one block; integer sums, so any order is exact).
__global__ void count_mask(const std::uint8_t* mask, int rows, double* count) {
  __shared__ int partial[256];
  int n = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) n += mask[r] != 0;
  partial[threadIdx.x] = n;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) count[0] = partial[0];
}

// sum becomes the mean over the masked rows.
__global__ void batchnorm_mean(double* sum, const double* count, int ch) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < ch) sum[c] /= count[0] > 0 ? count[0] : 1.0;
}

__global__ void batchnorm_finish_stats(const double* mu, const double* ss, const double* count, float* mean,
                                       float* rstd, float* stat_sums, int ch, float eps) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= ch) return;
  const double n = count[0] > 0 ? count[0] : 1.0;
  const double var = ss[c] / n;
  mean[c] = float(mu[c]);
  rstd[c] = float(1.0 / sqrt(var + eps));
  const double unbiased = count[0] > 1 ? ss[c] / (count[0] - 1) : var;
  stat_sums[c] += float(mu[c]);
  stat_sums[ch + c] += float(unbiased);
}

__global__ void batchnorm_apply(const float* x, const std::uint8_t* mask, const float* gamma, const float* beta,
                                const float* mean, const float* rstd, float* y, int rows, int ch) {
  const std::size_t n = std::size_t(rows) * ch;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const int c = int(i % ch);
    y[i] = mask[i / ch] ? (x[i] - mean[c]) * rstd[c] * gamma[c] + beta[c] : 0.0f;
  }
}

__global__ void batchnorm_eval(const float* x, const std::uint8_t* mask, const float* gamma, const float* beta,
                               const float* running_mean, const float* running_var, float* y, int rows, int ch,
                               float eps) {
  const std::size_t n = std::size_t(rows) * ch;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const int c = int(i % ch);
    y[i] = mask[i / ch] ? (x[i] - running_mean[c]) / sqrtf(running_var[c] + eps) * gamma[c] + beta[c] : 0.0f;
  }
}

__global__ void batchnorm_accumulate_params(const double* sum_dy_xhat, const double* sum_dy, float* dgamma,
                                            float* dbeta, int ch) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= ch) return;
  dgamma[c] += float(sum_dy_xhat[c]);
  dbeta[c] += float(sum_dy[c]);
}

__global__ void batchnorm_dx(const float* dy, const float* x, const std::uint8_t* mask, const float* gamma,
                             const float* mean, const float* rstd, const double* sum_dy_xhat,
                             const double* sum_dy, const double* count, float* dx, int rows, int ch) {
  const std::size_t total = std::size_t(rows) * ch;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const int c = int(i % ch);
    if (!mask[i / ch]) {
      dx[i] = 0;
      continue;
    }
    const double n = count[0] > 0 ? count[0] : 1.0;
    const float xhat = (x[i] - mean[c]) * rstd[c];
    dx[i] = gamma[c] * rstd[c] * float(dy[i] - sum_dy[c] / n - xhat * sum_dy_xhat[c] / n);
  }
}

unsigned column_blocks(int cols) { return unsigned((cols + 255) / 256); }

}  // namespace

// y in fp32, then rounded to its type (round_to). Under device.fused, a copy_only y's 16-bit copy
// alone in the normalising pass (no fp32 y, no rounding pass).
void CudaBackend::layernorm_forward(const float* x, const float* gamma, const float* beta, Output y, float* mean,
                                    float* rstd, int rows, int dim, float eps) {
  if (rows <= 0) return;
  if (y.copy_only && y.copy.data && writes_copies_alone(y.dtype())) {
    layernorm_forward_kernel<true><<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
        x, gamma, beta, y.values, mean, rstd, rows, dim, eps, y.dtype(), static_cast<std::uint16_t*>(y.copy.data));
    CUDA_CHECK_LAUNCH();
    return;
  }
  layernorm_forward_kernel<false><<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
      x, gamma, beta, y.values, mean, rstd, rows, dim, eps, DType::f32, nullptr);
  CUDA_CHECK_LAUNCH();
  round_to(y, std::size_t(rows) * dim);
}

void CudaBackend::layernorm_backward(const float* dy, Operand x, const float* gamma, const float* mean,
                                     const float* rstd, float* dx, float* dgamma, float* dbeta, int rows, int dim) {
  if (rows <= 0 || dim <= 0) return;
  layernorm_dx_kernel<<<row_blocks(rows), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(dy, x, gamma, mean, rstd, dx,
                                                                                    rows, dim);
  CUDA_CHECK_LAUNCH();
  // One scratch: the chunk partials, then the two column sums.
  const std::size_t part = partial_bytes<float>(rows, dim);
  float* buf = static_cast<float*>(scratch(part + 2 * sizeof(float) * dim));
  float* dg = buf + part / sizeof(float);
  float* db = dg + dim;
  column_sums<float>(stream_, LayerNormParamTerms{dy, x, mean, rstd, dim}, rows, dim, buf, dg, db);
  accumulate_params<<<column_blocks(dim), 256, 0, stream_>>>(dg, db, dgamma, dbeta, dim);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::batchnorm_forward_train(const float* x, const std::uint8_t* row_mask, const float* gamma,
                                          const float* beta, float* y, float* mean, float* rstd, float* stat_sums,
                                          int rows, int ch, float eps) {
  if (rows < 0 || ch <= 0) return;
  // One scratch: chunk partials, then mu, ss, an unused second sum, and the masked row count.
  const std::size_t part = partial_bytes<double>(rows, ch);
  double* buf = static_cast<double*>(scratch(part + (3 * std::size_t(ch) + 1) * sizeof(double)));
  double* mu = buf + part / sizeof(double);
  double* ss = mu + ch;
  double* unused = ss + ch;
  double* count = unused + ch;
  count_mask<<<1, 256, 0, stream_>>>(row_mask, rows, count);
  CUDA_CHECK_LAUNCH();
  column_sums<double>(stream_, MaskedSum{x, row_mask, ch}, rows, ch, buf, mu, unused);
  batchnorm_mean<<<column_blocks(ch), 256, 0, stream_>>>(mu, count, ch);
  CUDA_CHECK_LAUNCH();
  column_sums<double>(stream_, MaskedSquaredDeviation{x, row_mask, mu, ch}, rows, ch, buf, ss, unused);
  batchnorm_finish_stats<<<column_blocks(ch), 256, 0, stream_>>>(mu, ss, count, mean, rstd, stat_sums, ch, eps);
  CUDA_CHECK_LAUNCH();
  if (rows == 0) return;
  batchnorm_apply<<<blocks_for(std::size_t(rows) * ch), kThreads, 0, stream_>>>(x, row_mask, gamma, beta, mean,
                                                                                rstd, y, rows, ch);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::batchnorm_forward_eval(const float* x, const std::uint8_t* row_mask, const float* gamma,
                                         const float* beta, const float* running_mean, const float* running_var,
                                         float* y, int rows, int ch, float eps) {
  if (rows <= 0 || ch <= 0) return;
  batchnorm_eval<<<blocks_for(std::size_t(rows) * ch), kThreads, 0, stream_>>>(x, row_mask, gamma, beta,
                                                                               running_mean, running_var, y, rows,
                                                                               ch, eps);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::batchnorm_backward(const float* dy, const float* x, const std::uint8_t* row_mask,
                                     const float* gamma, const float* mean, const float* rstd, float* dx,
                                     float* dgamma, float* dbeta, int rows, int ch) {
  if (rows <= 0 || ch <= 0) return;
  // One scratch: chunk partials, then sum(dy*xhat), sum(dy) and the masked row count.
  const std::size_t part = partial_bytes<double>(rows, ch);
  double* buf = static_cast<double*>(scratch(part + (2 * std::size_t(ch) + 1) * sizeof(double)));
  double* sum_dy_xhat = buf + part / sizeof(double);
  double* sum_dy = sum_dy_xhat + ch;
  double* count = sum_dy + ch;
  count_mask<<<1, 256, 0, stream_>>>(row_mask, rows, count);
  CUDA_CHECK_LAUNCH();
  column_sums<double>(stream_, BatchNormParamTerms{dy, x, mean, rstd, row_mask, ch}, rows, ch, buf, sum_dy_xhat,
                      sum_dy);
  batchnorm_accumulate_params<<<column_blocks(ch), 256, 0, stream_>>>(sum_dy_xhat, sum_dy, dgamma, dbeta, ch);
  CUDA_CHECK_LAUNCH();
  batchnorm_dx<<<blocks_for(std::size_t(rows) * ch), kThreads, 0, stream_>>>(dy, x, row_mask, gamma, mean, rstd,
                                                                            sum_dy_xhat, sum_dy, count, dx, rows,
                                                                            ch);
  CUDA_CHECK_LAUNCH();
}

}  // namespace avtrain::cuda
