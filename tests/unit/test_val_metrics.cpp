// The metrics of the field (train/val_metrics.hpp) on cases worked by hand: ties taken together as
// sklearn takes them, classes without positives left out of the means, top-k, and the normal quantile
// of d'. The same metrics against sklearn itself on a trained model's scores:
// e2e_val_metrics_equal_sklearns_at_every_layout.
#include <gtest/gtest.h>

#include <cmath>

#include "model/label_targets.hpp"
#include "train/val_metrics.hpp"

namespace avtrain {
namespace {

TEST(ValMetrics, TiedScoresCountTogetherAsSklearnCountsThem) {
  // scores 0.5 (positive), 0.5 (negative), 0.2 (positive): at 0.5 precision 1/2 recall 1/2, at 0.2
  // precision 2/3 recall 1: AP = 1/2 * 1/2 + 1/2 * 2/3. AUC: the tie counts a half, 0.2 < 0.5 nothing.
  const std::vector<double> scores{0.5, 0.5, 0.2};
  const std::vector<std::uint8_t> truth{1, 0, 1};
  EXPECT_DOUBLE_EQ(average_precision(scores, truth), 0.25 + 1.0 / 3);
  EXPECT_DOUBLE_EQ(roc_auc(scores, truth), 0.25);
  EXPECT_TRUE(std::isnan(average_precision(scores, {0, 0, 0})));
  EXPECT_TRUE(std::isnan(roc_auc(scores, {1, 1, 1})));
}

TEST(ValMetrics, MeansLeaveOutClassesWithoutPositivesAndTopKCountsSets) {
  // 3 samples, 6 classes. Sample 0's set {0, 2}, sample 1's {0}, sample 2's {3}: classes 1, 4 and 5
  // have no positive.
  const std::vector<float> logits{9, 1, 2, 3, 4, 5,  //
                                  0, 1, 2, 3, 4, 5,  //
                                  5, 4, 3, 2, 1, 0};
  const std::vector<std::uint8_t> targets{1, 0, 1, 0, 0, 0,  //
                                          1, 0, 0, 0, 0, 0,  //
                                          0, 0, 0, 1, 0, 0};
  const ValMetrics m = val_metrics(logits, targets, 6);
  EXPECT_DOUBLE_EQ(m.top1, 1.0 / 3);  // sample 0's arg-max 0 is in its set; 1's is 5, 2's is 0
  EXPECT_DOUBLE_EQ(m.top5, 2.0 / 3);  // sample 1's class 0 is the 6th of 6; sample 2's class 3 the 4th
  for (const int c : {1, 4, 5}) EXPECT_TRUE(std::isnan(m.per_class[std::size_t(c)].ap));
  EXPECT_EQ(m.per_class[0].samples, 2);
  EXPECT_EQ(m.per_class[0].top1, 1);
  // Class 0: scores 9 (+), 0 (+), 5 (-): at 9 P 1 R 1/2; at 5 P 1/2; at 0 P 2/3 R 1.
  EXPECT_DOUBLE_EQ(m.per_class[0].ap, 0.5 + 0.5 * 2.0 / 3);
  EXPECT_DOUBLE_EQ(m.map, (m.per_class[0].ap + m.per_class[2].ap + m.per_class[3].ap) / 3);
  EXPECT_DOUBLE_EQ(m.auc, (m.per_class[0].auc + m.per_class[2].auc + m.per_class[3].auc) / 3);
  EXPECT_NEAR(m.dprime, std::sqrt(2.0) * normal_quantile(m.auc), 1e-15);
}

TEST(ValMetrics, NormalQuantileToTheDoublesPrecision) {
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-14);
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-16);
  EXPECT_NEAR(normal_quantile(1e-10), -6.361340902404056, 1e-12);
  EXPECT_NEAR(normal_quantile(0.999), 3.090232306167813, 1e-13);
  EXPECT_EQ(normal_quantile(1.0), INFINITY);
  EXPECT_TRUE(std::isnan(normal_quantile(1.5)));
}

TEST(LabelTargets, MixupMixesTheSetsAndOneLabelReadsAsASetOfOne) {
  data::MicroBatch b;
  b.size = 2;
  b.label = {0, 2};
  b.mix_label = {2, 0};
  b.mix_weight = 0.75f;
  EXPECT_EQ(label_sets(b, 3), (std::vector<std::uint8_t>{1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(mixed_targets(b, 3, true), (std::vector<float>{0.75f, 0, 0.25f, 0.25f, 0, 0.75f}));
  b.labels = {1, 1, 0, 0, 0, 1};
  b.mix_labels = {0, 0, 1, 1, 1, 0};
  EXPECT_EQ(mixed_targets(b, 3, true), (std::vector<float>{0.75f, 0.75f, 0.25f, 0.25f, 0.25f, 0.75f}));
  EXPECT_EQ(mixed_targets(b, 3, false), (std::vector<float>{1, 1, 0, 0, 0, 1}));
}

}  // namespace
}  // namespace avtrain
