#pragma once
// The rows of layers.csv for a stage: per module (its parameters, grouped as registered) the norm
// of its gradients (unscaled) and of its values, the share of its gradient values the compute type
// does not hold at full precision, its non-finite count, and its output's largest |value|.
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "io/trace_writer.hpp"
#include "model/activation_stats.hpp"
#include "model/param_store.hpp"
#include "optim/distributed_optimizer.hpp"

namespace avtrain {

class LayerStatistics {
 public:
  // The stage's modules: its trainable parameters grouped by module, in registration order.
  explicit LayerStatistics(const ParamStore& params);

  // One row per module, from the gradients as accumulated (multiplied by loss_scale): norms are
  // reported unscaled, the underflow share as the compute type sees the scaled values. At dp > 1
  // each replica takes its part's statistics, added over the group (the optimizer's
  // statistics_part()), so that every replica returns the same rows. grad_sum_squares gets the
  // unscaled sum of squares over the stage.
  std::vector<LayerRow> rows(DistributedOptimizer& optimizer, const ActivationStats& acts, DType compute,
                             double loss_scale, double& grad_sum_squares) const;

 private:
  struct Module {
    std::string name;
    std::vector<ParamId> params;
  };
  std::vector<Module> modules_;
};

}  // namespace avtrain
