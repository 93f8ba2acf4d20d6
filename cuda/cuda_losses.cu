// Losses with double arithmetic where the CPU uses it: cross-entropy and sigmoid binary
// cross-entropy (one block per row) and
// symmetric InfoNCE (double products through cublasDgemm). Sums over rows are fixed-order tree
// reductions in one block, so the loss is the same every run; the scalars come back through the
// pinned host_result after a stream synchronisation.
#include <algorithm>
#include <limits>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};
struct ArgMax {
  double value;
  int index;
};
// The larger value; on a tie the lower index, as the CPU's first maximum.
struct FirstMax {
  __device__ ArgMax operator()(ArgMax a, ArgMax b) const {
    return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
  }
};

// The combination of every thread's v in a fixed tree order; every thread gets it.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T buf[kThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + half]);
    __syncthreads();
  }
  const T result = buf[0];
  __syncthreads();  // buf is reused by the next call
  return result;
}

struct LossResult {
  double loss;
  int hits;
};

// One block per row of logits: the row's -log p[label], whether its first maximum is the label,
// and dlogits = grad_scale * (p - onehot) / rows.
__global__ void cross_entropy_rows(const float* logits, const std::int32_t* labels, float* dlogits, int classes,
                                   int rows, float grad_scale, double* row_loss, int* row_hit) {
  const std::size_t base = std::size_t(blockIdx.x) * classes;
  const float* s = logits + base;
  ArgMax best{-INFINITY, classes};
  for (int c = threadIdx.x; c < classes; c += kThreads) best = FirstMax{}(best, ArgMax{double(s[c]), c});
  best = block_reduce(best, FirstMax{});
  const double m = best.value;
  double sum = 0;
  for (int c = threadIdx.x; c < classes; c += kThreads) sum += exp(double(s[c]) - m);
  sum = block_reduce(sum, Sum{});
  const int label = labels[blockIdx.x];
  if (dlogits)
    for (int c = threadIdx.x; c < classes; c += kThreads) {
      const double p = exp(double(s[c]) - m) / sum;
      dlogits[base + c] = float(grad_scale * (p - (c == label ? 1.0 : 0.0)) / rows);
    }
  if (threadIdx.x == 0) {
    row_loss[blockIdx.x] = -(double(s[label]) - m - log(sum));
    row_hit[blockIdx.x] = best.index == label;
  }
}

__global__ void cross_entropy_total(const double* row_loss, const int* row_hit, int rows, LossResult* result) {
  double loss = 0;
  int hits = 0;
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    loss += row_loss[r];
    hits += row_hit[r];
  }
  loss = block_reduce(loss, Sum{});
  hits = block_reduce(hits, Sum{});
  if (threadIdx.x == 0) *result = {loss / rows, hits};
}

// One block per row: the row's sum of max(x, 0) - x t + log1p(exp(-|x|)) and
// dlogits = grad_scale * (sigmoid(x) - t) / (rows classes), in double as the CPU.
__global__ void binary_cross_entropy_rows(const float* logits, const float* targets, float* dlogits, int classes,
                                          double inv_n, float grad_scale, double* row_loss) {
  const std::size_t base = std::size_t(blockIdx.x) * classes;
  double sum = 0;
  for (int c = threadIdx.x; c < classes; c += kThreads) {
    const double x = logits[base + c], t = targets[base + c];
    const double e = exp(-fabs(x));
    sum += fmax(x, 0.0) - x * t + log1p(e);
    if (dlogits) {
      const double sigmoid = x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      dlogits[base + c] = float(grad_scale * (sigmoid - t) * inv_n);
    }
  }
  sum = block_reduce(sum, Sum{});
  if (threadIdx.x == 0) row_loss[blockIdx.x] = sum;
}

__global__ void row_loss_total(const double* row_loss, int rows, double inv_n, LossResult* result) {
  double loss = 0;
  for (int r = threadIdx.x; r < rows; r += kThreads) loss += row_loss[r];
  loss = block_reduce(loss, Sum{});
  if (threadIdx.x == 0) *result = {loss * inv_n, 0};
}

// One block per row of a (blocks [0, B)) or b (blocks [B, 2B)): norm = |x| + 1e-12, xn = x / norm.
__global__ void normalize_rows(const float* a, const float* b, double* an, double* bn, double* norms, int B, int D) {
  const bool is_a = blockIdx.x < unsigned(B);
  const std::size_t row = std::size_t(is_a ? blockIdx.x : blockIdx.x - B) * D;
  const float* x = (is_a ? a : b) + row;
  double* xn = (is_a ? an : bn) + row;
  double ss = 0;
  for (int k = threadIdx.x; k < D; k += kThreads) ss += double(x[k]) * x[k];
  const double norm = sqrt(block_reduce(ss, Sum{})) + 1e-12;
  for (int k = threadIdx.x; k < D; k += kThreads) xn[k] = x[k] / norm;
  if (threadIdx.x == 0) norms[blockIdx.x] = norm;
}

// One block per softmax of s[B, B]: rows i (blocks [0, B)), then columns j (blocks [B, 2B)), the
// rows of s^T. Saves its max and sum of exp, and -log p of its diagonal element.
__global__ void softmax_stats(const double* s, int B, double* maxes, double* sums, double* losses) {
  const bool is_row = blockIdx.x < unsigned(B);
  const int k = is_row ? blockIdx.x : blockIdx.x - B;
  const std::size_t first = is_row ? std::size_t(k) * B : k, step = is_row ? 1 : B;
  double m = -INFINITY;
  for (int j = threadIdx.x; j < B; j += kThreads) m = fmax(m, s[first + j * step]);
  m = block_reduce(m, Max{});
  double sum = 0;
  for (int j = threadIdx.x; j < B; j += kThreads) sum += exp(s[first + j * step] - m);
  sum = block_reduce(sum, Sum{});
  if (threadIdx.x == 0) {
    maxes[blockIdx.x] = m;
    sums[blockIdx.x] = sum;
    losses[blockIdx.x] = -(s[std::size_t(k) * B + k] - m - log(sum));
  }
}

// In place: s[i, j] becomes dS[i, j] / tau, dS = 0.5/B * (p[i,j] + pt[j,i] - 2 [i==j]).
__global__ void info_nce_scores_grad(double* s, const double* maxes, const double* sums, int B, double tau) {
  const std::size_t n = std::size_t(B) * B;
  for (std::size_t e = first_index(); e < n; e += grid_stride()) {
    const int i = int(e / B), j = int(e % B);
    const double p = exp(s[e] - maxes[i]) / sums[i];
    const double pt = exp(s[e] - maxes[B + j]) / sums[B + j];
    s[e] = 0.5 / B * (p + pt - 2.0 * (i == j)) / tau;
  }
}

// One block per row (a then b): dx += grad_scale * (dxn - xn (xn . dxn)) / |x|.
__global__ void info_nce_input_grad(const double* an, const double* bn, const double* dan, const double* dbn,
                                    const double* norms, float* da, float* db, int B, int D, float grad_scale) {
  const bool is_a = blockIdx.x < unsigned(B);
  const std::size_t row = std::size_t(is_a ? blockIdx.x : blockIdx.x - B) * D;
  const double* xn = (is_a ? an : bn) + row;
  const double* dxn = (is_a ? dan : dbn) + row;
  float* dx = (is_a ? da : db) + row;
  double dot = 0;
  for (int k = threadIdx.x; k < D; k += kThreads) dot += xn[k] * dxn[k];
  dot = block_reduce(dot, Sum{});
  const double norm = norms[blockIdx.x];
  for (int k = threadIdx.x; k < D; k += kThreads) dx[k] += float(grad_scale * (dxn[k] - xn[k] * dot) / norm);
}

// loss = 0.5 * (sum of the row losses + sum of the column losses) / B
__global__ void info_nce_total(const double* losses, int B, LossResult* result) {
  double rows = 0, cols = 0;
  for (int i = threadIdx.x; i < B; i += kThreads) {
    rows += losses[i];
    cols += losses[B + i];
  }
  rows = block_reduce(rows, Sum{});
  cols = block_reduce(cols, Sum{});
  if (threadIdx.x == 0) *result = {0.5 * (rows + cols) / B, 0};
}

// Row-major C[M,N] = alpha op(A)[M,K] op(B)[K,N], as the column-major C^T = op(B)^T op(A)^T.
void dgemm(cublasHandle_t handle, bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
           const double* B, int ldb, double* C, int ldc) {
  const double beta = 0.0;
  CUBLAS_CHECK(cublasDgemm(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                           ldb, A, lda, &beta, C, ldc));
}

}  // namespace

double CudaBackend::cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                                  int classes, float grad_scale, int* correct) {
  if (correct) *correct = 0;
  if (rows <= 0 || classes <= 0) return std::numeric_limits<double>::quiet_NaN();  // the CPU's 0/0
  // One scratch: the result, the row losses, the row hits.
  char* buf = static_cast<char*>(scratch(sizeof(LossResult) + (sizeof(double) + sizeof(int)) * std::size_t(rows)));
  auto* result = reinterpret_cast<LossResult*>(buf);
  auto* row_loss = reinterpret_cast<double*>(buf + sizeof(LossResult));
  auto* row_hit = reinterpret_cast<int*>(row_loss + rows);
  cross_entropy_rows<<<rows, kThreads, 0, stream_>>>(logits, labels, dlogits, classes, rows, grad_scale, row_loss,
                                                     row_hit);
  CUDA_CHECK_LAUNCH();
  cross_entropy_total<<<1, kThreads, 0, stream_>>>(row_loss, row_hit, rows, result);
  CUDA_CHECK_LAUNCH();
  auto* host = static_cast<LossResult*>(host_result(sizeof(LossResult)));
  CUDA_CHECK(cudaMemcpyAsync(host, result, sizeof(LossResult), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (correct) *correct = host->hits;
  return host->loss;
}

double CudaBackend::binary_cross_entropy(const float* logits, const float* targets, float* dlogits, int rows,
                                         int classes, float grad_scale) {
  if (rows <= 0 || classes <= 0) return std::numeric_limits<double>::quiet_NaN();  // the CPU's 0/0
  char* buf = static_cast<char*>(scratch(sizeof(LossResult) + sizeof(double) * std::size_t(rows)));
  auto* result = reinterpret_cast<LossResult*>(buf);
  auto* row_loss = reinterpret_cast<double*>(buf + sizeof(LossResult));
  const double inv_n = 1.0 / (double(rows) * double(classes));
  binary_cross_entropy_rows<<<rows, kThreads, 0, stream_>>>(logits, targets, dlogits, classes, inv_n, grad_scale,
                                                            row_loss);
  CUDA_CHECK_LAUNCH();
  row_loss_total<<<1, kThreads, 0, stream_>>>(row_loss, rows, inv_n, result);
  CUDA_CHECK_LAUNCH();
  auto* host = static_cast<LossResult*>(host_result(sizeof(LossResult)));
  CUDA_CHECK(cudaMemcpyAsync(host, result, sizeof(LossResult), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host->loss;
}

double CudaBackend::info_nce(const float* a, const float* b, float* da, float* db, int B, int D, float tau,
                             float grad_scale) {
  if (B <= 0) return std::numeric_limits<double>::quiet_NaN();  // the CPU's 0/0
  D = std::max(D, 0);
  const std::size_t rows = std::size_t(B) * D, scores = std::size_t(B) * B;
  // One scratch: the result, then an, bn, dan, dbn [B, D], s [B, B], norms, maxes, sums, losses [2B].
  char* buf = static_cast<char*>(scratch(sizeof(LossResult) + sizeof(double) * (4 * rows + scores + 8 * std::size_t(B))));
  auto* result = reinterpret_cast<LossResult*>(buf);
  auto* an = reinterpret_cast<double*>(buf + sizeof(LossResult));
  double* bn = an + rows;
  double* dan = bn + rows;
  double* dbn = dan + rows;
  double* s = dbn + rows;
  double* norms = s + scores;
  double* maxes = norms + 2 * B;
  double* sums = maxes + 2 * B;
  double* losses = sums + 2 * B;

  normalize_rows<<<2 * B, kThreads, 0, stream_>>>(a, b, an, bn, norms, B, D);
  CUDA_CHECK_LAUNCH();
  if (D > 0) {
    dgemm(cublas(), false, true, B, B, D, 1.0 / tau, an, D, bn, D, s, B);  // s = an bn^T / tau
  } else {
    CUDA_CHECK(cudaMemsetAsync(s, 0, sizeof(double) * scores, stream_));
  }
  softmax_stats<<<2 * B, kThreads, 0, stream_>>>(s, B, maxes, sums, losses);
  CUDA_CHECK_LAUNCH();
  info_nce_total<<<1, kThreads, 0, stream_>>>(losses, B, result);
  CUDA_CHECK_LAUNCH();
  if (D > 0) {
    info_nce_scores_grad<<<blocks_for(scores), kThreads, 0, stream_>>>(s, maxes, sums, B, tau);
    CUDA_CHECK_LAUNCH();
    dgemm(cublas(), false, false, B, D, B, 1.0, s, B, bn, D, dan, D);  // dan = g bn
    dgemm(cublas(), true, false, B, D, B, 1.0, s, B, an, D, dbn, D);   // dbn = g^T an
    info_nce_input_grad<<<2 * B, kThreads, 0, stream_>>>(an, bn, dan, dbn, norms, da, db, B, D, grad_scale);
    CUDA_CHECK_LAUNCH();
  }
  auto* host = static_cast<LossResult*>(host_result(sizeof(LossResult)));
  CUDA_CHECK(cudaMemcpyAsync(host, result, sizeof(LossResult), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host->loss;
}

}  // namespace avtrain::cuda
