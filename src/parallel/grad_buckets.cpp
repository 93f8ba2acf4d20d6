#include "parallel/grad_buckets.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "parallel/zero_parts.hpp"

namespace avtrain::parallel {

GradBuckets::GradBuckets(Backend& be, float* grads, std::vector<std::size_t> bounds, double bucket_mb, DType wire,
                         Communicator& group, std::vector<std::size_t> parts, int sample_parts)
    : be_(be), grads_(grads), wire_(wire), group_(group), replicas_(group.size() / std::max(1, sample_parts)),
      scatter_(!parts.empty()) {
  require(sample_parts >= 1 && group.size() % sample_parts == 0,
          "internal: " + std::to_string(group.size()) + " ranks of a gradient group in parts of " +
              std::to_string(sample_parts));
  const auto cap = std::max<std::size_t>(1, std::size_t(bucket_mb * 1024 * 1024 / sizeof(float)));
  // Walk the parameters from the last one back, closing a bucket once it reaches the cap.
  if (bounds.size() < 2) return;
  std::size_t end = bounds.back();
  for (std::size_t i = bounds.size() - 1; i-- > 0;) {
    const std::size_t begin = bounds[i];
    if (end - begin >= cap || i == 0) {
      Bucket b;
      b.begin = begin;
      b.end = end;
      if (scatter_) b.parts = parts_within(parts, begin, end);
      if (wire_ != DType::f32) b.wire.resize(end - begin);
      buckets_.push_back(std::move(b));
      end = begin;
    }
  }
}

void GradBuckets::start_step() {
  for (Bucket& b : buckets_) b.launched = false;
  next_ = 0;
  local_sum_squares_.resize(1);
  local_sum_squares_.zero();
}

void GradBuckets::launch(Bucket& b) {
  b.launched = true;
  if (group_.size() == 1) return;  // nothing to average: the local gradient is the stage's
  float* g = grads_ + b.begin;
  const std::size_t n = b.end - b.begin;
  be_.sum_squares_into(g, n, local_sum_squares_.data());
  // Scaled in the gradient buffer (the result overwrites it anyway), then cast for a 16-bit wire.
  if (replicas_ > 1) be_.scale(g, n, 1.0f / float(replicas_));
  void* travels = g;
  if (wire_ != DType::f32) {
    be_.pack(g, {b.wire.data(), wire_}, n);
    travels = b.wire.data();
  }
  b.request = scatter_ ? group_.reduce_scatter_async(travels, b.parts, wire_)
                       : group_.all_reduce_async(travels, n, wire_, ReduceOp::sum);
}

double GradBuckets::local_sum_squares() const {
  double sum = 0;
  if (local_sum_squares_.size()) local_sum_squares_.download(&sum);
  return sum;
}

void GradBuckets::ready_from(std::size_t offset) {
  while (next_ < buckets_.size() && buckets_[next_].begin >= offset) launch(buckets_[next_++]);
}

void GradBuckets::progress() {
  for (std::size_t i = 0; i < next_; ++i) buckets_[i].request.test();
}

void GradBuckets::finish(const std::function<void(std::size_t)>& waiting_for) {
  ready_from(0);
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (waiting_for) waiting_for(k);
    b.request.wait();
    if (wire_ == DType::f32 || group_.size() == 1) continue;
    // Under ZeRO only this replica's part holds sums.
    const std::size_t lo = scatter_ ? b.parts[std::size_t(group_.rank())] : 0;
    const std::size_t hi = scatter_ ? b.parts[std::size_t(group_.rank()) + 1] : b.end - b.begin;
    if (hi > lo) be_.unpack({b.wire.data() + lo, wire_}, grads_ + b.begin + lo, hi - lo);
  }
}

}  // namespace avtrain::parallel
