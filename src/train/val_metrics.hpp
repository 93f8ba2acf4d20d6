#pragma once
// The metrics the field reports over a whole validation set, from every sample's logits and set of
// classes (gathered in sample order first: AP cannot be averaged over shards or ranks). As sklearn
// computes them (checked against it, tests/unit/test_val_metrics.cpp and tests/e2e/check_val_metrics.py):
// - AP of a class: average_precision_score, the sum over the distinct scores, highest first, of
//   (recall - previous recall) x precision, tied scores taken together; mAP the mean over the classes
//   with at least one positive sample (AudioSet's mAP, AST, PANNs).
// - AUC of a class: roc_auc_score, the trapezoids under the ROC curve over the distinct scores; the
//   mean over the classes with positive and negative samples.
// - d' = sqrt(2) Phi^-1(mean AUC) (AST's d_prime).
// - top-1 / top-5: the share of samples whose first arg-max / one of the 5 highest logits (ties: the
//   lower class first) is one of their classes (sklearn's top_k_accuracy_score for one label a sample).
#include <cstdint>
#include <limits>
#include <vector>

namespace avtrain {

struct ClassMetrics {
  std::int64_t samples = 0;  // samples whose set holds the class
  std::int64_t top1 = 0;     // of those, the ones whose first arg-max is this class
  double ap = std::numeric_limits<double>::quiet_NaN();   // NaN without a positive sample
  double auc = std::numeric_limits<double>::quiet_NaN();  // NaN without positive and negative samples
};

struct ValMetrics {
  double top1 = 0, top5 = 0;
  double map = std::numeric_limits<double>::quiet_NaN();
  double auc = std::numeric_limits<double>::quiet_NaN();
  double dprime = std::numeric_limits<double>::quiet_NaN();
  std::vector<ClassMetrics> per_class;
};

// logits and targets: [rows, classes], targets 0/1.
ValMetrics val_metrics(const std::vector<float>& logits, const std::vector<std::uint8_t>& targets, int classes);

// One class's scores and 0/1 truths.
double average_precision(const std::vector<double>& scores, const std::vector<std::uint8_t>& truth);
double roc_auc(const std::vector<double>& scores, const std::vector<std::uint8_t>& truth);

// Phi^-1(p), the standard normal quantile: -inf at 0, +inf at 1, NaN outside [0, 1].
double normal_quantile(double p);

}  // namespace avtrain
