#include "data/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/keyed_random.hpp"

namespace avtrain::data {

namespace {
void shuffle(std::vector<std::int64_t>& v, KeyedRandom& rng) {
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}
}  // namespace

Sampler::Sampler(std::int64_t total, double val_fraction, std::uint64_t seed, std::int64_t global_batch)
    : seed_(seed), global_batch_(global_batch) {
  require(val_fraction >= 0 && val_fraction < 1, "data.val_fraction must be in [0, 1)");
  std::vector<std::int64_t> all(total);
  for (std::int64_t i = 0; i < total; ++i) all[i] = i;
  KeyedRandom rng(seed, "validation-split");
  shuffle(all, rng);
  const auto n_val = std::int64_t(std::llround(val_fraction * double(total)));
  val_.assign(all.begin(), all.begin() + n_val);
  train_.assign(all.begin() + n_val, all.end());
  std::sort(val_.begin(), val_.end());
  std::sort(train_.begin(), train_.end());
  steps_per_epoch_ = train_size() / global_batch_;
  require(steps_per_epoch_ >= 1, "the training split has " + std::to_string(train_size()) +
                                     " samples, fewer than one global batch of " + std::to_string(global_batch) +
                                     " (train.micro_batch x train.micro_batches); lower them or data.val_fraction");
}

void Sampler::draw_by_weight(const std::vector<double>& weights) {
  require(weights.size() == train_.size(), "draw_by_weight: one weight per training sample");
  cumulative_.resize(weights.size());
  double total = 0;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    require(weights[k] >= 0 && std::isfinite(weights[k]), "draw_by_weight: a weight is negative or not finite");
    cumulative_[k] = total += weights[k];
  }
  require(total > 0, "data.sampling balanced: every training sample has weight 0");
  order_epoch_ = -1;
}

std::vector<std::int64_t> Sampler::batch(std::int64_t step) {
  const int epoch = epoch_of(step);
  if (epoch != order_epoch_) {
    if (cumulative_.empty()) {
      order_ = train_;
      KeyedRandom rng(seed_, std::uint64_t(epoch), 0x5eed);
      shuffle(order_, rng);
    } else {  // with replacement: the first running sum above u x total
      KeyedRandom rng(seed_, std::uint64_t(epoch), 0xba1a);
      order_.resize(std::size_t(steps_per_epoch_ * global_batch_));
      for (std::int64_t& sample : order_) {
        const double u = rng.uniform(0.0, cumulative_.back());
        const auto at = std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin();
        sample = train_[std::min(std::size_t(at), train_.size() - 1)];
      }
    }
    order_epoch_ = epoch;
  }
  const std::int64_t begin = (step % steps_per_epoch_) * global_batch_;
  return {order_.begin() + begin, order_.begin() + begin + global_batch_};
}

}  // namespace avtrain::data
