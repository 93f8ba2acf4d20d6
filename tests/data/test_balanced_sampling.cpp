// data.sampling balanced (data/balanced_weights.hpp, Sampler::draw_by_weight): AST's weights, draws
// whose frequencies match them (a chi-square bound), the same draws for the same (seed, epoch), and
// the same samples whatever reads them (the sampler knows no rank; the layouts' runs:
// mpi_balanced_pp2_dp2_matches_one_rank).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "data/balanced_weights.hpp"
#include "data/sampler.hpp"

namespace avtrain::data {
namespace {

// 200 samples: 150 of class 0 alone, 30 of classes {0, 1}, 15 of class 2, 5 of classes {1, 2}.
std::vector<std::vector<int>> skewed_sets() {
  std::vector<std::vector<int>> sets;
  for (int i = 0; i < 150; ++i) sets.push_back({0});
  for (int i = 0; i < 30; ++i) sets.push_back({0, 1});
  for (int i = 0; i < 15; ++i) sets.push_back({2});
  for (int i = 0; i < 5; ++i) sets.push_back({1, 2});
  return sets;
}

TEST(BalancedSampling, WeightsAreASTs) {
  const std::vector<double> w = balanced_weights(skewed_sets(), 3);
  const double w0 = 1000 / (180 + 0.01), w1 = 1000 / (35 + 0.01), w2 = 1000 / (20 + 0.01);
  EXPECT_DOUBLE_EQ(w[0], w0);
  EXPECT_DOUBLE_EQ(w[150], w0 + w1);
  EXPECT_DOUBLE_EQ(w[180], w2);
  EXPECT_DOUBLE_EQ(w[199], w1 + w2);
}

TEST(BalancedSampling, DrawFrequenciesMatchTheWeightsAndRepeatForTheSameSeed) {
  const auto sets = skewed_sets();
  const std::vector<double> w = balanced_weights(sets, 3);
  Sampler sampler(200, 0.0, 9, 20), again(200, 0.0, 9, 20), other_seed(200, 0.0, 10, 20);
  sampler.draw_by_weight(w);
  again.draw_by_weight(w);
  other_seed.draw_by_weight(w);
  ASSERT_EQ(sampler.steps_per_epoch(), 10);
  std::vector<double> seen(200, 0.0);
  const int epochs = 500;  // 100,000 draws
  for (std::int64_t step = 0; step < epochs * sampler.steps_per_epoch(); ++step) {
    const std::vector<std::int64_t> batch = sampler.batch(step);
    EXPECT_EQ(batch, again.batch(step));
    if (step == 0) EXPECT_NE(batch, other_seed.batch(step));
    for (const std::int64_t s : batch) seen[std::size_t(s)] += 1;
  }
  EXPECT_NE(sampler.batch(0), sampler.batch(sampler.steps_per_epoch()));  // each epoch its own draws
  double total_w = 0;
  for (const double x : w) total_w += x;
  const double draws = 200.0 * epochs;
  // Pearson's chi-square over the 200 samples (199 degrees of freedom): mean 199, sd sqrt(398) ~ 20;
  // the bound 199 + 6 sd (p < 1e-7) fails a sampler off by a few percent in any group of samples.
  double chi2 = 0;
  for (std::size_t k = 0; k < seen.size(); ++k) {
    const double expected = draws * w[k] / total_w;
    chi2 += (seen[k] - expected) * (seen[k] - expected) / expected;
  }
  EXPECT_LT(chi2, 199 + 6 * std::sqrt(398.0)) << "chi-square " << chi2;
  // The point of it: the rare classes drawn far more often than their 35 and 20 of 180 samples. (Not
  // equally: a sample of classes {0, 1} weighs for both, as in AST.) Their share is what the weights say.
  std::map<int, double> drawn, expected;
  for (std::size_t k = 0; k < seen.size(); ++k)
    for (const int c : sets[k]) {
      drawn[c] += seen[k];
      expected[c] += w[k];
    }
  for (const int c : {1, 2}) {
    EXPECT_NEAR(drawn[c] / drawn[0], expected[c] / expected[0], 0.03) << "class " << c;
    EXPECT_GT(drawn[c] / drawn[0], 0.6);
  }
}

TEST(BalancedSampling, ASampleOfWeightZeroIsNeverDrawn) {
  Sampler sampler(10, 0.0, 1, 5);
  std::vector<double> w(10, 1.0);
  w[3] = 0;
  sampler.draw_by_weight(w);
  for (std::int64_t step = 0; step < 400; ++step)
    for (const std::int64_t s : sampler.batch(step)) EXPECT_NE(s, 3);
}

}  // namespace
}  // namespace avtrain::data
