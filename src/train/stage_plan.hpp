#pragma once
// Which layers each pipeline stage runs: the whole net is registered (no memory is allocated for
// it) to weigh its layers, and cut into pp stages as parallel.partition says. Every rank computes
// the same plan from the same options.
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "data/shard_set.hpp"
#include "parallel/stage_partition.hpp"
#include "train/run_config.hpp"

namespace avtrain {

struct StagePlan {
  std::vector<parallel::LayerCost> layers;  // the whole net, in order (activation_bytes left 0)
  std::vector<parallel::StageRange> stages;
  std::vector<std::string> modules;         // the whole net's trainable modules, in order
};

// Also checks precision.fp32_layers against the whole net (a pattern that names no module is an error).
StagePlan plan_stages(const RunConfig& config, Backend& be, const data::SetInfo& set, int pp);

}  // namespace avtrain
