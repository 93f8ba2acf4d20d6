#pragma once
// --dry-run's sizing of a job for a GPU: what each rank of the layout holds on a device of
// dry-run.device_memory_gb (its training state, the activations of its micro-batches in flight, the
// workspace), whether that fits, and where it does not, which single setting makes it fit:
// train.recompute, train.micro_batch, --pp or data.clip_seconds, with the number that does.
//
// Measured on the CPU backend's tensors (what the CUDA backend allocates for the same layers and
// precision); the arena takes 90 % of the device (or device.arena_mb) for them. The estimate is of
// the unfused path: device.fused 1 in bf16 keeps no attention probabilities, as train.recompute
// attention does.
#include <map>
#include <ostream>
#include <vector>

#include "backend/backend.hpp"
#include "data/shard_set.hpp"
#include "parallel/stage_partition.hpp"
#include "train/memory_probe.hpp"
#include "train/run_config.hpp"

namespace avtrain {

// A net's memory at one input shape and recompute setting: its training state (parameters, working
// copies, gradients, optimizer state), the trainable parameters of each layer (how a pipeline cut
// splits that state), and what a micro-batch keeps.
struct NetMemory {
  double state_bytes = 0;
  std::vector<parallel::LayerCost> layers;  // name and trainable parameters, in order
  MicroBatchMemoryModel micro_batch;
};
// Measures it on `be` (the CPU backend) with recompute r; the state is `state_per_param` bytes for
// each parameter the net registers at this input (its positional embeddings follow the tokens).
NetMemory measure_net(const RunConfig& config, Backend& be, const data::SetInfo& input, Recompute r,
                      double state_per_param);

// What one rank of a pipeline stage holds, in bytes.
struct RankMemory {
  double state = 0, activations = 0, workspace = 0;
  int in_flight = 0;  // micro-batches whose activations the stage holds at once under the schedule
  double total() const { return state + activations + workspace; }
};
// Each stage's rank at pp stages cut as parallel.partition says (params where it names layers and
// pp differs), micro-batches of B.
std::vector<RankMemory> rank_memory(const RunConfig& config, const NetMemory& m, int pp, int B);

// The bytes the CUDA arena takes for tensors on one GPU: device.arena_mb, else 90 % of
// dry-run.device_memory_gb GiB.
double device_bytes_for_tensors(const RunConfig& config);

// Prints the per-rank table for --device cuda and, where a rank does not fit, what makes it fit.
// `stored`: the shard set as stored (the clip search cuts it); `measured`: the net at the run's input
// under each recompute setting.
void describe_device_fit(const RunConfig& config, Backend& be, const data::SetInfo& stored,
                         const std::map<Recompute, NetMemory>& measured, std::ostream& out);

}  // namespace avtrain
