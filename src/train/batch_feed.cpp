#include "train/batch_feed.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/model_config.hpp"

namespace avtrain {

BatchFeed::BatchFeed(data::ShardSet& shards, data::Sampler& sampler, const RunConfig& config,
                     const parallel::Topology& topo, bool reads, data::Fields fields, std::int64_t first_step,
                     std::int64_t stall_at, const data::Augmenter* augmenter)
    : sampler_(sampler), config_(config), topo_(topo), reads_(reads), fields_(fields),
      reader_(shards, config.data.reader_threads),
      next_to_submit_(first_step), stall_at_(stall_at),
      augmenter_(augmenter && augmenter->changes_training() ? augmenter : nullptr) {}

std::vector<std::future<data::MicroBatch>> BatchFeed::next(std::int64_t step) {
  const int M = config_.train.micro_batches, mb = config_.train.micro_batch;
  const std::int64_t last = step + std::max(0, config_.data.prefetch_steps);
  for (; next_to_submit_ <= last && next_to_submit_ < config_.train.steps; ++next_to_submit_) {
    std::vector<std::future<data::MicroBatch>> parts;
    if (reads_) {
      const std::vector<std::int64_t> global = sampler_.batch(next_to_submit_);
      for (int m = 0; m < M; ++m) {
        const auto begin = global.begin() + (std::int64_t(topo_.dp_rank) * M + m) * mb;
        data::Prefetcher::Transform augment;
        if (augmenter_) {
          const std::int64_t epoch = sampler_.epoch_of(next_to_submit_);
          augment = [a = augmenter_, epoch](data::MicroBatch& b) { a->train(b, epoch); };
        }
        parts.push_back(reader_.submit({begin, begin + mb}, fields_, std::move(augment)));
      }
      if (next_to_submit_ == stall_at_) parts[0] = never_.get_future();
    }
    ahead_.push_back(std::move(parts));
  }
  require(!ahead_.empty(), "step " + std::to_string(step) + ": no micro-batches submitted (steps out of order?)");
  auto parts = std::move(ahead_.front());
  ahead_.pop_front();
  return parts;
}

data::Augmenter make_augmenter(const RunConfig& config, const data::SetInfo& stored) {
  data::SpecShape spec;
  if (config.augment.spec_masks()) {
    const TokenGeometry g = TokenGeometry::of(config.model, data::cropped_input(stored, config.data.clip_seconds));
    spec = {g.frames, config.model.mel_bins, [g](int audio_len) { return g.valid_frames(audio_len); }};
  }
  return data::Augmenter(config.augment, config.data.clip_seconds, stored, config.train.seed, std::move(spec));
}

}  // namespace avtrain
