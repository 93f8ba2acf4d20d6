#pragma once
// Which global sample indices a step uses: a train/validation split keyed by seed, and an epoch
// shuffle keyed by (seed, epoch). It depends on no rank, so every layout sees the same samples.
#include <cstdint>
#include <vector>

namespace avtrain::data {

class Sampler {
 public:
  Sampler(std::int64_t total_samples, double val_fraction, std::uint64_t seed, std::int64_t global_batch);
  const std::vector<std::int64_t>& validation() const { return val_; }
  std::int64_t train_size() const { return std::int64_t(train_.size()); }
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int epoch_of(std::int64_t step) const { return int(step / steps_per_epoch_); }
  // The global batch of a step; the remainder of an epoch that does not fill a batch is dropped.
  std::vector<std::int64_t> batch(std::int64_t step);

 private:
  std::uint64_t seed_;
  std::int64_t global_batch_, steps_per_epoch_;
  std::vector<std::int64_t> train_, val_, order_;
  int order_epoch_ = -1;
};

}  // namespace avtrain::data
