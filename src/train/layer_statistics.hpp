#pragma once
// The rows of layers.csv for a stage: per module (its parameters, grouped as registered) the norm
// of its gradients (unscaled) and of its values, the share of its gradient values the compute type
// does not hold at full precision, its non-finite count, and its output's largest |value|; under
// precision.mode fp8, each FP8 linear's casts (add_fp8).
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "io/trace_writer.hpp"
#include "model/fp8_linears.hpp"
#include "model/activation_stats.hpp"
#include "model/param_store.hpp"
#include "optim/distributed_optimizer.hpp"

namespace avtrain {

class LayerStatistics {
 public:
  // The stage's modules: its trainable parameters grouped by module, in registration order.
  explicit LayerStatistics(const ParamStore& params);

  // The passes rows() reads, issued (their results in tensor memory: the optimizer's
  // start_statistics), the underflow threshold the compute type's.
  void start(DistributedOptimizer& optimizer, DType compute) const;

  // What the update's gate is decided from on the device (Backend::update_gate), the stage's sum
  // of squares taken module by module as rows() takes it: the same norm, the same bits.
  Backend::UpdateRule update_rule(double loss_scale, float max_norm, bool loss_finite);

  // One row per module, from the gradients as accumulated (multiplied by loss_scale) and the
  // statistics start() issued: norms are reported unscaled, the underflow share as the compute type
  // sees the scaled values. At dp > 1 each replica takes its part's statistics, added over the group
  // (the optimizer's statistics_part()), so that every replica returns the same rows.
  // grad_sum_squares gets the unscaled sum of squares over the stage.
  std::vector<LayerRow> rows(DistributedOptimizer& optimizer, const ActivationStats& acts, double loss_scale,
                             double& grad_sum_squares) const;

  // The fp8 columns of the rows of the stage's FP8 linears, from what the step's casts did
  // (Fp8Linears after its end_step: reduced over the replicas, at the scales the step used).
  static void add_fp8(std::vector<LayerRow>& rows, const Fp8Linears& fp8);

 private:
  std::vector<std::string> names_;  // the modules, in registration order
  std::vector<int> params_;         // their trainable parameters (ParamIds), module by module
  std::vector<int> first_;          // module m's: params_[first_[m], first_[m + 1])
  AlignedArray<int> device_params_, device_first_;  // the same in tensor memory, for update_rule()
};

}  // namespace avtrain
