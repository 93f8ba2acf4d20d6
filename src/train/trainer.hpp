#pragma once
// The step loop of one rank: its pipeline stage of AVNet, its replica's share of each global batch,
// the schedule's forwards and backwards with the transfers between stages, the bucketed gradient
// all-reduce, the agreement on found_inf and the global grad norm, AdamW, evaluation, and the
// traces (written by rank 0 from what every rank reports). It orchestrates only.
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
};

// Thrown by a rank that stops because another rank found the error and reports it: main exits
// without printing a second message.
class ErrorElsewhere : public std::runtime_error {
 public:
  ErrorElsewhere() : std::runtime_error("stopped because another rank failed") {}
};

class Trainer {
 public:
  Trainer(const RunConfig& config, Backend& backend, data::ShardSet& shards, parallel::ProcessGroups& groups);
  ~Trainer();
  // Trains config.train.steps steps; `manifest` goes to run.json (rank 0) with the model and layout
  // facts added. Every rank returns the same summary of losses; `log` is written by rank 0.
  TrainSummary run(nlohmann::json manifest, std::ostream& log);
  // --eval-only: loads the checkpoint --resume names and evaluates it on the validation split;
  // rank 0 prints the result and writes OUT/eval.json. Returns {"checkpoint", "step", "val_loss",
  // "val_acc", "val_samples", "val_indices"} on every rank.
  nlohmann::json evaluate_checkpoint(const nlohmann::json& manifest, std::ostream& log);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace avtrain
