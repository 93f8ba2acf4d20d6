#pragma once
// A pipeline stage's training state on one rank, as one object: the distributed optimizer in
// Megatron-LM's and DeepSpeed's sense. It owns the stage's parameters (ParamStore: fp32 masters,
// main gradients, 16-bit working copies), the data-parallel reduction of the gradients
// (GradBuckets), AdamW's moments and, under parallel.zero 1 at dp > 1, the replicas' parts of the
// flat buffers, which it alone decides and hands to each of these. It offers what a step does with
// that state: reduce, statistics, step, all-gather; and what a checkpoint reads of it.
//
// Two phases: the layers register their parameters into params() first (the model is built on
// it), then build() cuts the parts, allocates and initialises the parameters, and makes the buckets
// and AdamW. The dry run builds it the same way, without a data-parallel group (no buckets), so
// that what it reports is what a run of that layout holds.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/dtype.hpp"
#include "model/param_store.hpp"
#include "optim/adamw.hpp"
#include "optim/optim_config.hpp"
#include "parallel/communicator.hpp"
#include "parallel/grad_buckets.hpp"

namespace avtrain {

struct DistributedOptimizerConfig {
  OptimConfig optim;
  int zero = 0;             // parallel.zero: 1 splits the optimizer state (and 16-bit runs' masters)
  double bucket_mb = 25.0;  // parallel.grad_bucket_mb
  DType wire = DType::f32;  // parallel.grad_comm_dtype
  std::uint64_t seed = 1;   // train.seed: the parameters' initial values by (seed, name)
  int init_ulps = 0;        // train.init_ulps
  bool masters = true;      // precision.master_weights fp32; false (none): the bf16 weights are the parameters
  Rounding rounding = Rounding::nearest;  // precision.weight_rounding: how an update is written to them
  // parallel.cp: the ranks of the group that hold parts of the same samples' tokens. Their gradients
  // are parts of one replica's, so the group's sum is divided by the replicas, size / sample_parts.
  int sample_parts = 1;
};

class DistributedOptimizer {
 public:
  DistributedOptimizer(Backend& be, const DistributedOptimizerConfig& config);
  ~DistributedOptimizer();

  // Where the layers register their parameters, before build().
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }

  // After registration: replica dp_rank of dp (under parallel.cp, the stage's rank stage_rank() of
  // its dp x cp ranks: each context part counts as a replica here). `data` is the data-parallel
  // group the gradients are reduced over; null in the dry run (nothing reduced, no buckets).
  void build(int dp, int dp_rank, parallel::Communicator* data);

  // ---- the replicas' parts
  // Under zero 1 at dp > 1, the replicas' parts of the stage's flat buffers (dp + 1 bounds); else empty.
  const std::vector<std::size_t>& parts() const { return parts_; }
  // The data-parallel group (null in the dry run).
  parallel::Communicator* data_group() const { return data_; }
  bool sharded() const { return !parts_.empty(); }
  int dp() const { return dp_; }
  // The elements this replica's AdamW updates: its part, or every element (nullopt) when not sharded.
  std::optional<FlatPart> own_part() const;
  // The elements whose statistics (layers.csv, the gradient norm) this replica takes: at dp > 1 its
  // part of the ZeRO cut whether or not parallel.zero splits the state, so that a parameter a part
  // boundary cuts sums the same way in both settings; at dp 1 all.
  FlatPart statistics_part() const;

  // ---- reduce: the data-parallel average of the gradients, overlapping the last backward
  std::size_t buckets() const { return buckets_ ? buckets_->count() : 0; }
  void start_step();
  // The gradients at [offset, end of the buffer) are final: their buckets go (and those launched move).
  void gradients_final_from(std::size_t offset);
  // What is left goes, then every bucket is waited for; waiting_for(k) before bucket k.
  void finish_reduce(const std::function<void(std::size_t)>& waiting_for = {});
  // The sum of squares of this rank's own gradients before the reduction (0 at dp 1).
  double local_sum_squares() const;

  // ---- statistics of the parameters' gradients and values, by ParamId, each of its elements in
  // statistics_part(), added over the data-parallel group (one all-reduce). In two halves, so that
  // an update decided on the device (step_as_decided_on_device) can go between them:
  // start_statistics() issues the passes, their results left in tensor memory; statistics() reads
  // them back.
  struct Statistics {
    std::vector<Backend::TensorStats> grads, values;
  };
  void start_statistics(float grad_threshold);
  Statistics statistics();
  // The replicas hold the same weights to the bit: the sum of squares of what every replica holds
  // whole, its range over the group (min, max); equal where they agree.
  std::pair<double, double> replica_range();

  // ---- step: AdamW on this replica's part, the gradients times grad_factor (unscale and clip) in
  // the same pass, the working copies written; then all_gather() under ZeRO.
  void step(float lr, float grad_factor);
  // The same, its gate (the factor, or a skipped step) decided on the device from the gradient
  // statistics start_statistics() left there, by `rule` (Backend::update_gate): nothing returns to
  // the host in between. Counted (bias correction) once took_step() says the step was taken.
  void step_as_decided_on_device(float lr, const Backend::UpdateRule& rule);
  void took_step() { adamw_->took_step(); }
  // Under ZeRO: every replica's updated part to every replica (fp32 values, and the 16-bit working
  // copies where the masters are split). Nothing otherwise.
  void all_gather();
  void zero_grads() { params_.zero_grads(); }

  // ---- what a checkpoint reads and a resume writes
  AdamW& adamw() { return *adamw_; }
  // The new masters loaded: the working copies made from them.
  void loaded(Backend& be) { params_.refresh_working(be); }

  // ---- memory
  // "fp32 masters 1.23 MiB, AdamW moments ... (optimizer and masters ...), gradients ..., ..."
  std::string memory_description();
  // Parameters, main grads, AdamW moments (of this replica's part) and working copies, in bytes.
  double bytes() const;

 private:
  Backend& be_;
  DistributedOptimizerConfig config_;
  ParamStore params_;
  int dp_ = 1, dp_rank_ = 0;
  parallel::Communicator* data_ = nullptr;
  std::vector<std::size_t> parts_;
  std::unique_ptr<parallel::GradBuckets> buckets_;
  std::unique_ptr<AdamW> adamw_;

  // The statistics of every parameter's elements within `part` of the flat index space, read from
  // `base` (where element part.begin is), into `into` (tensor memory), in one pass.
  void start_param_stats(const float* base, FlatPart part, float threshold, AlignedArray<Backend::TensorStats>& into);
  // Without masters: the values' statistics of `part`, the fp32 values read where they are and the
  // bf16 weights widened one parameter at a time.
  void start_value_stats_masterless(FlatPart part);
  Buffer widened_;  // the widest bf16 parameter, widened
  AlignedArray<Backend::TensorStats> grad_stats_, value_stats_;  // what start_statistics() left
  double working_sum_squares();
};

}  // namespace avtrain
