#pragma once
// What run.json says of a run, assembled here alone: the options as resolved, the build, the data
// set, the model, the layout, the precision (RunRecord adds every start of the run); the run's
// fingerprint, the part of it a resumed run (and a restart finding its own traces) must match; and
// the layout and precision again as the log's first lines.
#include <cstddef>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "data/sampler.hpp"
#include "data/shard_set.hpp"
#include "model/model_config.hpp"
#include "parallel/topology.hpp"
#include "precision/precision_policy.hpp"
#include "train/run_config.hpp"
#include "train/stage_plan.hpp"

namespace avtrain {

class RunManifest {
 public:
  // val_shards: data.val_dir's set, or null.
  RunManifest(const RunConfig& config, const parallel::Topology& topo, Backend& be, const PrecisionPolicy& policy,
              const data::ShardSet& shards, const data::ShardSet* val_shards);

  // What a resumed run must match: the model, the data, the global batch, the seed, the precision.
  nlohmann::json fingerprint(const nlohmann::json& options) const;

  // How the blocks' attention runs (TransformerBlock's rule): "unfused", or "fused (ENGINE)" with the
  // backend's words for its engine.
  std::string attention_path() const;

  // What the run is besides its options and the whole net's plan: the stage's token geometry, the
  // split (train and validation samples), the gradient buckets and the loss scaling.
  struct Measures {
    TokenGeometry geometry;
    const data::Sampler& sampler;
    std::size_t val_samples = 0;
    std::size_t grad_buckets = 0;
    std::string loss_scaling;
  };
  // run.json without its starts.
  nlohmann::json run_json(const nlohmann::json& options, const nlohmann::json& fingerprint, const StagePlan& plan,
                          const Measures& measures) const;

  // The log's first lines (rank 0): the ranks and the batch, each stage's layers, the precision,
  // and this rank's parameter memory.
  void log_layout(std::ostream& log, const StagePlan& plan, const std::string& loss_scaling,
                  const std::string& parameter_memory) const;

 private:
  const RunConfig& config_;
  const parallel::Topology& topo_;
  Backend& be_;
  const PrecisionPolicy& policy_;
  const data::ShardSet& shards_;
  const data::ShardSet* val_shards_;
};

}  // namespace avtrain
