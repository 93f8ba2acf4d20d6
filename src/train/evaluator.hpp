#pragma once
// Validation: which samples (all of data.val_dir's set, or the split the sampler held out of
// data.dir), this replica's micro-batches of them (replica r takes micro-batches j with
// j % dp == r, read a few ahead), forward only through the pipeline (StageRunner); the loss and
// accuracy added over the world, and every sample's logits and set of classes gathered over the
// world in sample order (so the result does not depend on the layout) for the metrics of the field
// (train/val_metrics.hpp): every rank returns the same.
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
#include "train/val_metrics.hpp"

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
    ValMetrics metrics;  // top-1, top-5, mAP, AUC, d' and per class
    std::vector<float> logits;          // [samples, classes] in the order of samples()
    std::vector<std::uint8_t> targets;  // [samples, classes] 1 for each of a sample's classes
    // [{"class": "dog", "samples": 40, "acc": 0.95, "ap": 0.98, "auc": 0.99}, ...]: by name where the set
    // has them; multi-label: samples holding the class, its AP and AUC (no acc).
    nlohmann::json per_class = nlohmann::json::array();
  };
  // `reader` reads the validation set (where this stage reads samples at all).
  // augmenter: cuts validation clips to the run's input (the centred window), or null.
  Result evaluate(StageRunner& runner, data::Prefetcher& reader, const data::Augmenter* augmenter = nullptr) const;

  // "dog 0.950 (40), cat 0.900 (40), ...": accuracy (multi-label: AP) and samples per class.
  static std::string per_class_text(const nlohmann::json& rows);

 private:
  nlohmann::json per_class(const ValMetrics& metrics) const;

  const RunConfig& config_;
  const parallel::Topology& topo_;
  parallel::Communicator& world_;
  const data::ShardSet& shards_;
  std::vector<std::int64_t> samples_;
};

}  // namespace avtrain
