// Losses in fp32 with double accumulation: cross-entropy, sigmoid binary cross-entropy and symmetric InfoNCE.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"

namespace avtrain {

namespace {
// Row softmax of s[rows, cols] in double; returns sum over rows of -log p[row, target(row)].
double softmax_nll(const double* s, double* p, int rows, int cols, const std::int32_t* target,
                   bool diagonal_target) {
  double loss = 0;
  for (int r = 0; r < rows; ++r) {
    const double* sr = s + std::size_t(r) * cols;
    double* pr = p + std::size_t(r) * cols;
    double m = sr[0];
    for (int c = 1; c < cols; ++c) m = std::max(m, sr[c]);
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += (pr[c] = std::exp(sr[c] - m));
    for (int c = 0; c < cols; ++c) pr[c] /= sum;
    int t = diagonal_target ? r : target[r];
    loss += -(sr[t] - m - std::log(sum));
  }
  return loss;
}
}  // namespace

double CpuBackend::cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits,
                                 int rows, int classes, float grad_scale, int* correct) {
  std::vector<double> s(std::size_t(rows) * classes), p(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = logits[i];
  double loss = softmax_nll(s.data(), p.data(), rows, classes, labels, false) / rows;
  int hits = 0;
  for (int r = 0; r < rows; ++r) {
    int best = 0;
    for (int c = 0; c < classes; ++c) {
      std::size_t i = std::size_t(r) * classes + c;
      if (s[i] > s[std::size_t(r) * classes + best]) best = c;
      if (dlogits) dlogits[i] = float(grad_scale * (p[i] - (c == labels[r] ? 1.0 : 0.0)) / rows);
    }
    hits += best == labels[r];
  }
  if (correct) *correct = hits;
  return loss;
}

double CpuBackend::binary_cross_entropy(const float* logits, const float* targets, float* dlogits, int rows,
                                        int classes, float grad_scale) {
  const std::size_t n = std::size_t(rows) * std::size_t(classes);
  double loss = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = logits[i], t = targets[i];
    const double e = std::exp(-std::abs(x));  // in (0, 1]: no overflow for any x
    loss += std::max(x, 0.0) - x * t + std::log1p(e);
    if (dlogits) {
      const double sigmoid = x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      dlogits[i] = float(grad_scale * (sigmoid - t) / double(n));
    }
  }
  return loss / double(n);
}

double CpuBackend::info_nce(const float* a, const float* b, float* da, float* db, int B, int D,
                            float tau, float grad_scale) {
  std::vector<double> an(std::size_t(B) * D), bn(an.size()), na(B), nb(B);
  for (int i = 0; i < B; ++i) {
    double sa = 0, sb = 0;
    for (int k = 0; k < D; ++k) {
      sa += double(a[std::size_t(i) * D + k]) * a[std::size_t(i) * D + k];
      sb += double(b[std::size_t(i) * D + k]) * b[std::size_t(i) * D + k];
    }
    na[i] = std::sqrt(sa) + 1e-12;
    nb[i] = std::sqrt(sb) + 1e-12;
    for (int k = 0; k < D; ++k) {
      an[std::size_t(i) * D + k] = a[std::size_t(i) * D + k] / na[i];
      bn[std::size_t(i) * D + k] = b[std::size_t(i) * D + k] / nb[i];
    }
  }
  std::vector<double> s(std::size_t(B) * B), st(s.size()), p(s.size()), pt(s.size());
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < B; ++j) {
      double dot = 0;
      for (int k = 0; k < D; ++k) dot += an[std::size_t(i) * D + k] * bn[std::size_t(j) * D + k];
      s[std::size_t(i) * B + j] = st[std::size_t(j) * B + i] = dot / tau;
    }
  double loss = 0.5 * (softmax_nll(s.data(), p.data(), B, B, nullptr, true) +
                       softmax_nll(st.data(), pt.data(), B, B, nullptr, true)) / B;
  // dS[i,j] = 0.5/B * ((p[i,j] - [i==j]) + (pt[j,i] - [i==j]))
  std::vector<double> ds(s.size());
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < B; ++j)
      ds[std::size_t(i) * B + j] = 0.5 / B * (p[std::size_t(i) * B + j] + pt[std::size_t(j) * B + i] - 2.0 * (i == j));
  std::vector<double> dan(an.size(), 0.0), dbn(bn.size(), 0.0);
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < B; ++j) {
      double g = ds[std::size_t(i) * B + j] / tau;
      for (int k = 0; k < D; ++k) {
        dan[std::size_t(i) * D + k] += g * bn[std::size_t(j) * D + k];
        dbn[std::size_t(j) * D + k] += g * an[std::size_t(i) * D + k];
      }
    }
  // Through x/|x|: dx = (dxn - xn * (xn . dxn)) / |x|
  for (int i = 0; i < B; ++i) {
    double dota = 0, dotb = 0;
    for (int k = 0; k < D; ++k) {
      dota += an[std::size_t(i) * D + k] * dan[std::size_t(i) * D + k];
      dotb += bn[std::size_t(i) * D + k] * dbn[std::size_t(i) * D + k];
    }
    for (int k = 0; k < D; ++k) {
      std::size_t e = std::size_t(i) * D + k;
      da[e] += float(grad_scale * (dan[e] - an[e] * dota) / na[i]);
      db[e] += float(grad_scale * (dbn[e] - bn[e] * dotb) / nb[i]);
    }
  }
  return loss;
}

}  // namespace avtrain
