#pragma once
// The feed phase of a step: this replica's micro-batches, read ahead on the data reader's threads.
// Micro-batch m of a step is samples [(dp_rank M + m) mb, +mb) of the step's global batch, so that a
// micro-batch holds the same samples in every layout; the cp ranks of a replica read the same ones
// (each computes its part of their tokens). A stage that reads nothing (a middle stage)
// gets an empty list. With augmentation on (data/augment.hpp), a micro-batch is augmented as the
// stage collects it (future::get), keyed by the step's epoch and its samples' indices alone.
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <vector>

#include "data/augment.hpp"
#include "data/prefetcher.hpp"
#include "data/sampler.hpp"
#include "parallel/topology.hpp"
#include "train/run_config.hpp"

namespace avtrain {

class BatchFeed {
 public:
  // fields: what this stage reads of a sample; reads false: nothing at all. stall_at >= 0: the
  // first micro-batch of that step never arrives (debug.stall_reader, the watchdog's test).
  // augmenter: the run's training augmentation, or null.
  BatchFeed(data::ShardSet& shards, data::Sampler& sampler, const RunConfig& config, const parallel::Topology& topo,
            bool reads, data::Fields fields, std::int64_t first_step, std::int64_t stall_at = -1,
            const data::Augmenter* augmenter = nullptr);
  // The micro-batches of `step` (steps are taken in order from first_step), with the reads of the
  // next data.prefetch_steps steps submitted.
  std::vector<std::future<data::MicroBatch>> next(std::int64_t step);
  // The reader, for evaluation's reads between steps.
  data::Prefetcher& reader() { return reader_; }

 private:
  data::Sampler& sampler_;
  const RunConfig& config_;
  const parallel::Topology& topo_;
  bool reads_;
  data::Fields fields_;
  data::Prefetcher reader_;
  std::deque<std::vector<std::future<data::MicroBatch>>> ahead_;
  std::int64_t next_to_submit_;
  std::int64_t stall_at_;
  const data::Augmenter* augmenter_;
  std::promise<data::MicroBatch> never_;  // the stalled micro-batch's, never kept
};

// The run's augmentation: the options, the stored shapes, the seed and (for SpecAugment) the
// log-mel's shape as the model computes it from the cropped input.
data::Augmenter make_augmenter(const RunConfig& config, const data::SetInfo& stored);

}  // namespace avtrain
