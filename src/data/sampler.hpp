#pragma once
// Which global sample indices a step uses: a train/validation split keyed by seed, and each epoch's
// samples keyed by (seed, epoch): a shuffle of the training split (data.sampling uniform), or draws with
// replacement by weight (balanced: data/balanced_weights.hpp). It depends on no rank, so every layout
// and thread count sees the same samples.
#include <cstdint>
#include <vector>

#include "core/enum_names.hpp"

namespace avtrain::data {

enum class Sampling { uniform, balanced };
constexpr EnumNames<Sampling, 2> enum_names(Sampling) {
  return {{{Sampling::uniform, "uniform"}, {Sampling::balanced, "balanced"}}};
}

class Sampler {
 public:
  Sampler(std::int64_t total_samples, double val_fraction, std::uint64_t seed, std::int64_t global_batch);
  const std::vector<std::int64_t>& validation() const { return val_; }
  const std::vector<std::int64_t>& train() const { return train_; }
  std::int64_t train_size() const { return std::int64_t(train_.size()); }
  // From now on each epoch draws its steps_per_epoch() x global batch samples with replacement, train()[k]
  // with probability weights[k] / their sum (weights: one per training sample, >= 0, not all 0).
  void draw_by_weight(const std::vector<double>& weights);
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int epoch_of(std::int64_t step) const { return int(step / steps_per_epoch_); }
  // The global batch of a step; the remainder of an epoch that does not fill a batch is dropped.
  std::vector<std::int64_t> batch(std::int64_t step);

 private:
  std::uint64_t seed_;
  std::int64_t global_batch_, steps_per_epoch_;
  std::vector<std::int64_t> train_, val_, order_;
  std::vector<double> cumulative_;  // draw_by_weight: the running sums of the weights, else empty
  int order_epoch_ = -1;
};

}  // namespace avtrain::data
