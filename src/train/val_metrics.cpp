#include "train/val_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace avtrain {

namespace {

// Walks the scores from the highest down, one step per group of equal scores: visit(tp, fp) with the
// true and false positives at and above that score.
template <class Visit>
void walk_thresholds(const std::vector<double>& scores, const std::vector<std::uint8_t>& truth, Visit visit) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  double tp = 0, fp = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    (truth[order[k]] ? tp : fp) += 1;
    if (k + 1 == order.size() || scores[order[k + 1]] != scores[order[k]]) visit(tp, fp);
  }
}

}  // namespace

double average_precision(const std::vector<double>& scores, const std::vector<std::uint8_t>& truth) {
  const double positives = double(std::count_if(truth.begin(), truth.end(), [](std::uint8_t t) { return t != 0; }));
  if (positives == 0) return std::numeric_limits<double>::quiet_NaN();
  double ap = 0, last_tp = 0;
  walk_thresholds(scores, truth, [&](double tp, double fp) {
    ap += (tp - last_tp) / positives * (tp / (tp + fp));
    last_tp = tp;
  });
  return ap;
}

double roc_auc(const std::vector<double>& scores, const std::vector<std::uint8_t>& truth) {
  const double positives = double(std::count_if(truth.begin(), truth.end(), [](std::uint8_t t) { return t != 0; }));
  const double negatives = double(truth.size()) - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  double area = 0, last_tp = 0, last_fp = 0;
  walk_thresholds(scores, truth, [&](double tp, double fp) {
    area += (fp - last_fp) * (tp + last_tp) / 2;
    last_tp = tp;
    last_fp = fp;
  });
  return area / (positives * negatives);
}

double normal_quantile(double p) {
  if (!(p >= 0 && p <= 1)) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0) return -std::numeric_limits<double>::infinity();
  if (p == 1) return std::numeric_limits<double>::infinity();
  // Acklam's rational approximation (relative error 1.15e-9), then two Halley steps on
  // Phi(x) - p with Phi from erfc, which bring it to the double's precision.
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01,  -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  const double low = 0.02425;
  double x;
  if (p < low) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - low) {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log1p(-p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  for (int i = 0; i < 2; ++i) {
    const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
    const double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
    x = x - u / (1 + x * u / 2);
  }
  return x;
}

ValMetrics val_metrics(const std::vector<float>& logits, const std::vector<std::uint8_t>& targets, int classes) {
  ValMetrics m;
  const auto K = std::size_t(classes);
  const std::size_t rows = K ? logits.size() / K : 0;
  m.per_class.resize(K);
  if (rows == 0) return m;
  std::int64_t top1 = 0, top5 = 0;
  std::vector<std::size_t> order(K);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * K;
    const std::uint8_t* truth = targets.data() + r * K;
    std::iota(order.begin(), order.end(), std::size_t{0});
    const std::size_t k = std::min<std::size_t>(5, K);
    std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(), [&](std::size_t a, std::size_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    const bool hit1 = truth[order[0]] != 0;
    top1 += hit1;
    top5 += std::any_of(order.begin(), order.begin() + std::ptrdiff_t(k), [&](std::size_t c) { return truth[c] != 0; });
    for (std::size_t c = 0; c < K; ++c) {
      if (!truth[c]) continue;
      m.per_class[c].samples += 1;
      m.per_class[c].top1 += order[0] == c;
    }
  }
  m.top1 = double(top1) / double(rows);
  m.top5 = double(top5) / double(rows);
  std::vector<double> scores(rows);
  std::vector<std::uint8_t> truth(rows);
  double ap_sum = 0, auc_sum = 0;
  int ap_classes = 0, auc_classes = 0;
  for (std::size_t c = 0; c < K; ++c) {
    for (std::size_t r = 0; r < rows; ++r) {
      scores[r] = logits[r * K + c];
      truth[r] = targets[r * K + c];
    }
    ClassMetrics& cm = m.per_class[c];
    cm.ap = average_precision(scores, truth);
    cm.auc = roc_auc(scores, truth);
    if (!std::isnan(cm.ap)) ap_sum += cm.ap, ++ap_classes;
    if (!std::isnan(cm.auc)) auc_sum += cm.auc, ++auc_classes;
  }
  if (ap_classes) m.map = ap_sum / ap_classes;
  if (auc_classes) {
    m.auc = auc_sum / auc_classes;
    m.dprime = std::sqrt(2.0) * normal_quantile(m.auc);
  }
  return m;
}

}  // namespace avtrain
