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

std::vector<std::int64_t> Sampler::batch(std::int64_t step) {
  const int epoch = epoch_of(step);
  if (epoch != order_epoch_) {
    order_ = train_;
    KeyedRandom rng(seed_, std::uint64_t(epoch), 0x5eed);
    shuffle(order_, rng);
    order_epoch_ = epoch;
  }
  const std::int64_t begin = (step % steps_per_epoch_) * global_batch_;
  return {order_.begin() + begin, order_.begin() + begin + global_batch_};
}

}  // namespace avtrain::data
