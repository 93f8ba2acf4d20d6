#include "train/run_state.hpp"

#include <utility>

#include "data/balanced_weights.hpp"

namespace avtrain {

RunState::RunState(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world,
                   DType compute, data::ShardSet& shards, const data::ShardSet* val_shards,
                   nlohmann::json fingerprint)
    : sampler(make_sampler(config, topo, shards, val_shards != nullptr)),
      evaluator(config, topo, world, shards, val_shards, sampler),
      scaler(config.precision, compute),
      checkpoints(config, topo, world),
      fingerprint(std::move(fingerprint)),
      record(config, topo),
      budget(config.train.max_minutes) {
  if (config.data.sampling == data::Sampling::balanced)
    sampler.draw_by_weight(data::balanced_weights(shards, sampler.train()));
}

data::Sampler RunState::make_sampler(const RunConfig& config, const parallel::Topology& topo,
                                     const data::ShardSet& shards, bool has_val_dir) {
  return data::Sampler(shards.info().total_samples, has_val_dir ? 0.0 : config.data.val_fraction, config.train.seed,
                       config.global_batch(topo.dp));
}

}  // namespace avtrain
