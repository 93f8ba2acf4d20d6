#pragma once
// The step loop: reads micro-batches through the prefetcher, runs AVNet forward and backward,
// accumulates gradients, clips, steps AdamW, evaluates, and writes traces. It orchestrates only.
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "backend/backend.hpp"
#include "data/shard_set.hpp"
#include "train/run_config.hpp"

namespace avtrain {

struct TrainSummary {
  int steps = 0;
  std::int64_t skipped = 0;  // steps skipped for non-finite gradients (fp16/bf16)
  double final_loss = 0, val_loss = 0, val_acc = 0;
  double median_step_ms = 0;
  std::vector<double> step_ms;  // training part of each step (evaluation excluded)
};

class Trainer {
 public:
  Trainer(const RunConfig& config, Backend& backend, data::ShardSet& shards);
  ~Trainer();
  // Prints the layers, parameter counts and a memory estimate.
  void describe(std::ostream& out);
  // Trains config.train.steps steps; `manifest` goes to run.json with the model facts added.
  TrainSummary run(nlohmann::json manifest, std::ostream& log);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace avtrain
