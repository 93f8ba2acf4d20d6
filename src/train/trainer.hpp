#pragma once
// The step loop of one rank: its pipeline stage of AVNet, its replica's share of each global batch,
// and each step as eight phases: feed (the micro-batches) -> schedule (forwards, backwards, the
// transfers between stages, the bucketed gradient all-reduce) -> agree (found_inf, grad norm, loss)
// -> update (AdamW) -> report (rows to rank 0) -> evaluate -> record (the traces, the log line) ->
// checkpoint. It orchestrates only; the pieces it strings together each have a file of their own:
// the stage at work (StageRunner: forwards, backwards, transfers), the stage's training state
// (optim/DistributedOptimizer), the run's state (RunState: sampler, loss scaler, Checkpointing,
// RunRecord, TimeBudget, BatchFeed, Evaluator), run.json's contents (RunManifest), the claim on
// --out (out_dir), layers.csv's rows (LayerStatistics), the rank reports (RankReport), the
// watchdog's marks (JobWatchdog) and the faults tests inject (DebugFaults).
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "backend/backend.hpp"
#include "data/shard_set.hpp"
#include "parallel/process_groups.hpp"
#include "train/run_config.hpp"

namespace avtrain {

struct TrainSummary {
  int steps = 0;
  std::int64_t skipped = 0;  // steps skipped for non-finite gradients (fp16/bf16)
  double final_loss = 0, val_loss = 0, val_acc = 0;
  double median_step_ms = 0;
  std::vector<double> step_ms;  // training part of each step (evaluation excluded)
  std::string stopped_early;    // why the run stopped before train.steps (a signal, the time budget), or ""
  bool checkpointed = false;    // a checkpoint of the last step trained is committed
};

class Trainer {
 public:
  // val_shards: the validation set of data.val_dir, or null (a split of `shards`, data.val_fraction).
  Trainer(const RunConfig& config, Backend& backend, data::ShardSet& shards, data::ShardSet* val_shards,
          parallel::ProcessGroups& groups);
  ~Trainer();
  // Trains (or, resumed, goes on training) to config.train.steps steps. `options`: the options as
  // resolved ("model.width": 128, ...), for run.json and for what a checkpoint must match. Every
  // rank returns the same summary of losses; `log` is written by rank 0.
  TrainSummary run(const nlohmann::json& options, std::ostream& log);
  // --eval-only: loads the checkpoint --resume names and evaluates it on the validation split;
  // rank 0 prints the result and writes OUT/eval.json. Returns {"checkpoint", "step", "val_loss",
  // "val_acc", "val_samples", "val_set", "val_indices", "per_class"} on every rank.
  nlohmann::json evaluate_checkpoint(const nlohmann::json& options, std::ostream& log);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace avtrain
