// LayerNorm (float statistics per row) and masked BatchNorm (double accumulation over rows).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"

namespace avtrain {

namespace {

// The mean and 1 / standard deviation of G rows of x (leading dimension dim), each row's sums taken
// in order: G independent chains side by side, so a row's sums cost what one add costs, not its
// latency. Every G gives the same bits for a row.
template <int G>
void row_statistics(const float* x, int dim, float eps, float* mean, float* rstd) {
  float s[G] = {};
  for (int i = 0; i < dim; ++i)
    for (int k = 0; k < G; ++k) s[k] += x[std::size_t(k) * dim + i];
  float mu[G];
  for (int k = 0; k < G; ++k) mu[k] = s[k] / dim;
  float v[G] = {};
  for (int i = 0; i < dim; ++i)
    for (int k = 0; k < G; ++k) {
      const float xi = x[std::size_t(k) * dim + i];
      v[k] += (xi - mu[k]) * (xi - mu[k]);
    }
  for (int k = 0; k < G; ++k) {
    mean[k] = mu[k];
    rstd[k] = 1.0f / std::sqrt(v[k] / dim + eps);
  }
}

// LayerNorm backward's row means of g = dy * gamma and of g * xhat for G rows from row r0, each
// row's sums in order (G chains side by side, as row_statistics).
template <int G>
void gradient_means(const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd, int r0,
                    int dim, float* mg, float* mgx) {
  float sum_g[G] = {}, sum_gx[G] = {};
  for (int i = 0; i < dim; ++i)
    for (int k = 0; k < G; ++k) {
      const std::size_t at = std::size_t(r0 + k) * dim + i;
      const float g = dy[at] * gamma[i];
      const float xhat = (x[at] - mean[r0 + k]) * rstd[r0 + k];
      sum_g[k] += g;
      sum_gx[k] += g * xhat;
    }
  for (int k = 0; k < G; ++k) {
    mg[k] = sum_g[k] / dim;
    mgx[k] = sum_gx[k] / dim;
  }
}

constexpr int kRowGroup = 8;

}  // namespace

void CpuBackend::layernorm_forward(const float* x, const float* gamma, const float* beta, Output y_out,
                                   float* mean, float* rstd, int rows, int dim, float eps) {
  float* y = y_out.values;
  const int groups = (rows + kRowGroup - 1) / kRowGroup;
#pragma omp parallel for schedule(static) if (std::size_t(rows) * dim >= kParallelMinElements)
  for (int g = 0; g < groups; ++g) {
    const int r0 = g * kRowGroup, r1 = std::min(rows, r0 + kRowGroup);
    if (r1 - r0 == kRowGroup) {
      row_statistics<kRowGroup>(x + std::size_t(r0) * dim, dim, eps, mean + r0, rstd + r0);
    } else {
      for (int r = r0; r < r1; ++r) row_statistics<1>(x + std::size_t(r) * dim, dim, eps, mean + r, rstd + r);
    }
    for (int r = r0; r < r1; ++r) {
      const float* xr = x + std::size_t(r) * dim;
      float* yr = y + std::size_t(r) * dim;
      const float mu = mean[r], rs = rstd[r];
      for (int i = 0; i < dim; ++i) yr[i] = (xr[i] - mu) * rs * gamma[i] + beta[i];
    }
  }
  round_to(y_out, std::size_t(rows) * dim);
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma
void CpuBackend::layernorm_backward(const float* dy, Operand x_in, const float* gamma,
                                    const float* mean, const float* rstd, float* dx, float* dgamma,
                                    float* dbeta, int rows, int dim) {
  const float* x = widened(x_in, std::size_t(rows) * dim, operand_x_);
  const int groups = (rows + kRowGroup - 1) / kRowGroup;
#pragma omp parallel for schedule(static) if (std::size_t(rows) * dim >= kParallelMinElements)
  for (int g = 0; g < groups; ++g) {
    const int r0 = g * kRowGroup, r1 = std::min(rows, r0 + kRowGroup);
    float mg[kRowGroup], mgx[kRowGroup];
    if (r1 - r0 == kRowGroup) {
      gradient_means<kRowGroup>(x, dy, gamma, mean, rstd, r0, dim, mg, mgx);
    } else {
      for (int r = r0; r < r1; ++r) gradient_means<1>(x, dy, gamma, mean, rstd, r, dim, mg + (r - r0), mgx + (r - r0));
    }
    for (int r = r0; r < r1; ++r) {
      const float* xr = x + std::size_t(r) * dim;
      const float* dyr = dy + std::size_t(r) * dim;
      float* dxr = dx + std::size_t(r) * dim;
      const float mu = mean[r], rs = rstd[r], mg_r = mg[r - r0], mgx_r = mgx[r - r0];
      for (int i = 0; i < dim; ++i) {
        float xhat = (xr[i] - mu) * rs;
        dxr[i] = rs * (dyr[i] * gamma[i] - mg_r - xhat * mgx_r);
      }
    }
  }
  // Parameter gradients: each thread sums a band of features over all rows.
  constexpr int band = 64;
#pragma omp parallel for schedule(static) if (std::size_t(rows) * dim >= kParallelMinElements)
  for (int i0 = 0; i0 < dim; i0 += band) {
    const int i1 = std::min(dim, i0 + band);
    float dg[band] = {}, db[band] = {};
    for (int r = 0; r < rows; ++r) {
      const float* xr = x + std::size_t(r) * dim;
      const float* dyr = dy + std::size_t(r) * dim;
      const float mu = mean[r], rs = rstd[r];
#pragma omp simd
      for (int i = i0; i < i1; ++i) {
        dg[i - i0] += dyr[i] * (xr[i] - mu) * rs;
        db[i - i0] += dyr[i];
      }
    }
    for (int i = i0; i < i1; ++i) {
      dgamma[i] += dg[i - i0];
      dbeta[i] += db[i - i0];
    }
  }
}

void CpuBackend::batchnorm_forward_train(const float* x, const std::uint8_t* row_mask,
                                         const float* gamma, const float* beta, float* y, float* mean,
                                         float* rstd, float* stat_sums, int rows, int ch, float eps) {
  std::vector<double> s(ch, 0.0), ss(ch, 0.0);
  std::size_t count = 0;
  for (int r = 0; r < rows; ++r) {
    if (!row_mask[r]) continue;
    ++count;
    const float* xr = x + std::size_t(r) * ch;
    for (int c = 0; c < ch; ++c) s[c] += xr[c];
  }
  const double n = double(count > 0 ? count : 1);
  for (int c = 0; c < ch; ++c) s[c] /= n;
  for (int r = 0; r < rows; ++r) {
    if (!row_mask[r]) continue;
    const float* xr = x + std::size_t(r) * ch;
    for (int c = 0; c < ch; ++c) ss[c] += (xr[c] - s[c]) * (xr[c] - s[c]);
  }
  for (int c = 0; c < ch; ++c) {
    double var = ss[c] / n;
    mean[c] = float(s[c]);
    rstd[c] = float(1.0 / std::sqrt(var + eps));
    double unbiased = count > 1 ? ss[c] / double(count - 1) : var;
    stat_sums[c] += float(s[c]);
    stat_sums[ch + c] += float(unbiased);
  }
  for (int r = 0; r < rows; ++r) {
    float* yr = y + std::size_t(r) * ch;
    const float* xr = x + std::size_t(r) * ch;
    if (!row_mask[r]) {
      for (int c = 0; c < ch; ++c) yr[c] = 0;
      continue;
    }
    for (int c = 0; c < ch; ++c) yr[c] = (xr[c] - mean[c]) * rstd[c] * gamma[c] + beta[c];
  }
}

void CpuBackend::batchnorm_forward_eval(const float* x, const std::uint8_t* row_mask,
                                        const float* gamma, const float* beta,
                                        const float* running_mean, const float* running_var, float* y,
                                        int rows, int ch, float eps) {
  for (int r = 0; r < rows; ++r) {
    float* yr = y + std::size_t(r) * ch;
    const float* xr = x + std::size_t(r) * ch;
    for (int c = 0; c < ch; ++c) {
      yr[c] = row_mask[r] ? (xr[c] - running_mean[c]) / std::sqrt(running_var[c] + eps) * gamma[c] + beta[c]
                          : 0.0f;
    }
  }
}

// dx = gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), means over the masked rows.
void CpuBackend::batchnorm_backward(const float* dy, const float* x, const std::uint8_t* row_mask,
                                    const float* gamma, const float* mean, const float* rstd,
                                    float* dx, float* dgamma, float* dbeta, int rows, int ch) {
  std::vector<double> sum_dy(ch, 0.0), sum_dy_xhat(ch, 0.0);
  std::size_t count = 0;
  for (int r = 0; r < rows; ++r) {
    if (!row_mask[r]) continue;
    ++count;
    const float* xr = x + std::size_t(r) * ch;
    const float* dyr = dy + std::size_t(r) * ch;
    for (int c = 0; c < ch; ++c) {
      float xhat = (xr[c] - mean[c]) * rstd[c];
      sum_dy[c] += dyr[c];
      sum_dy_xhat[c] += double(dyr[c]) * xhat;
    }
  }
  const double n = double(count > 0 ? count : 1);
  for (int c = 0; c < ch; ++c) {
    dgamma[c] += float(sum_dy_xhat[c]);
    dbeta[c] += float(sum_dy[c]);
  }
  for (int r = 0; r < rows; ++r) {
    float* dxr = dx + std::size_t(r) * ch;
    if (!row_mask[r]) {
      for (int c = 0; c < ch; ++c) dxr[c] = 0;
      continue;
    }
    const float* xr = x + std::size_t(r) * ch;
    const float* dyr = dy + std::size_t(r) * ch;
    for (int c = 0; c < ch; ++c) {
      float xhat = (xr[c] - mean[c]) * rstd[c];
      dxr[c] = gamma[c] * rstd[c] * float(dyr[c] - sum_dy[c] / n - xhat * sum_dy_xhat[c] / n);
    }
  }
}

}  // namespace avtrain
