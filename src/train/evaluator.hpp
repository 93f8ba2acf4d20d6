#pragma once
// Validation: which samples (all of data.val_dir's set, or the split the sampler held out of
// data.dir), this replica's micro-batches of them (replica r takes micro-batches j with
// j % dp == r, read a few ahead), forward only through the pipeline (StageRunner), and the loss,
// accuracy and accuracy per class, added over the world so every rank returns the same.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/prefetcher.hpp"
#include "data/sampler.hpp"
#include "data/shard_set.hpp"
#include "parallel/communicator.hpp"
#include "parallel/topology.hpp"
#include "train/run_config.hpp"
#include "train/stage_runner.hpp"

namespace avtrain {

class Evaluator {
 public:
  // val_shards: data.val_dir's set, or null (the sampler's validation split of `shards`).
  Evaluator(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world,
            const data::ShardSet& shards, const data::ShardSet* val_shards, const data::Sampler& sampler);

  // The validation samples: indices into data.val_dir's set, or into data.dir's.
  const std::vector<std::int64_t>& samples() const { return samples_; }

  struct Result {
    double loss = 0, acc = 0;
    // [{"class": "dog", "samples": 40, "acc": 0.95}, ...]: by name where the set has them.
    nlohmann::json per_class = nlohmann::json::array();
  };
  // `reader` reads the validation set (where this stage reads samples at all).
  // augmenter: cuts validation clips to the run's input (the centred window), or null.
  Result evaluate(StageRunner& runner, data::Prefetcher& reader, const data::Augmenter* augmenter = nullptr) const;

  // "dog 0.950 (40), cat 0.900 (40), ...": accuracy and samples per class.
  static std::string per_class_text(const nlohmann::json& rows);

 private:
  nlohmann::json per_class(const std::vector<std::int64_t>& class_hits) const;

  const RunConfig& config_;
  const parallel::Topology& topo_;
  parallel::Communicator& world_;
  const data::ShardSet& shards_;
  std::vector<std::int64_t> samples_;
};

}  // namespace avtrain
