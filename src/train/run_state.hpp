#pragma once
// The state of a run beyond the stage's training state (the DistributedOptimizer): where it is (the
// step, the LR schedule's position, the loss scaler), what it reads (the sampler, the feed, the
// validation set), what it writes (run.json and the traces, the timeline, the checkpoints) and what
// it has measured. A checkpoint saves what a resume needs of it.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/dtype.hpp"
#include "data/prefetcher.hpp"
#include "data/sampler.hpp"
#include "data/shard_set.hpp"
#include "io/timeline.hpp"
#include "parallel/communicator.hpp"
#include "parallel/topology.hpp"
#include "precision/loss_scaler.hpp"
#include "train/batch_feed.hpp"
#include "train/checkpointing.hpp"
#include "train/evaluator.hpp"
#include "train/run_config.hpp"
#include "train/run_record.hpp"
#include "train/time_budget.hpp"
#include "train/trainer.hpp"

namespace avtrain {

struct RunState {
  // val_shards: data.val_dir's set, or null (a validation split of `shards`). fingerprint: what a
  // resumed run must match (RunManifest).
  RunState(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world, DType compute,
           data::ShardSet& shards, const data::ShardSet* val_shards, nlohmann::json fingerprint);

  // The run's order of samples: the validation split held out of `shards` (none with a val_dir),
  // each epoch's shuffle of the rest, cut into global batches. (data.sampling balanced: the constructor
  // then reads the training labels and has the sampler draw by their weights.)
  static data::Sampler make_sampler(const RunConfig& config, const parallel::Topology& topo,
                                    const data::ShardSet& shards, bool has_val_dir);

  using Clock = std::chrono::steady_clock;
  double elapsed_s() const { return elapsed_before_s + std::chrono::duration<double>(Clock::now() - started).count(); }

  data::Sampler sampler;
  Evaluator evaluator;                           // the validation samples, evaluated forward only
  std::unique_ptr<data::Prefetcher> val_reader;  // data.val_dir's reader, or null: the feed's reads them
  nlohmann::json per_class;                      // the last evaluation's accuracy per class
  LossScaler scaler;
  Checkpointing checkpoints;
  const nlohmann::json fingerprint;
  std::int64_t first_step = 0;
  int applied_steps = 0;  // a skipped step does not advance the LR schedule
  RunRecord record;       // run.json, the traces, the log line; the step and evaluation times
  std::optional<Timeline> timeline;
  std::optional<BatchFeed> feed;
  TrainSummary summary;
  double mem_peak = 0;
  TimeBudget budget;             // train.max_minutes, a Slurm job's end
  double elapsed_before_s = 0;   // the run's training time before this start (from its checkpoint)
  Clock::time_point started;
};

}  // namespace avtrain
