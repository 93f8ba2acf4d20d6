#pragma once
// What --dry-run prints: the layers and their parameters, the precision, a memory estimate measured
// by one forward of a full-length micro-batch, and the cut into pipeline stages with each stage's
// parameters, FLOPs and activation memory under the schedule.
#include <ostream>

#include "backend/backend.hpp"
#include "data/shard_set.hpp"
#include "train/run_config.hpp"

namespace avtrain {

void describe_run(const RunConfig& config, Backend& be, data::ShardSet& shards, std::ostream& out);

}  // namespace avtrain
