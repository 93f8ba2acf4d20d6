#pragma once
// This rank's pipeline stage at work: its layers of AVNet, the micro-batches in flight on it and the
// transfers to its neighbour stages. A step's forwards and backwards run here in the schedule's
// order (GPipe or 1F1B); evaluation runs micro-batches forward only. A micro-batch in flight has a
// slot (its flow, what its layers keep for backward, its samples); slots are reused, so their
// number is the most ever in flight, and what they hold is the activation memory of the step.
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "model/av_net.hpp"
#include "model/fp8_linears.hpp"
#include "optim/distributed_optimizer.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "train/ulysses_exchange.hpp"
#include "parallel/process_groups.hpp"
#include "train/ulysses_exchange.hpp"
#include "parallel/stage_partition.hpp"
#include "precision/precision_policy.hpp"
#include "train/job_watchdog.hpp"
#include "train/run_config.hpp"
#include "train/stage_link.hpp"
#include "train/step_work.hpp"

namespace avtrain {

class StageRunner {
 public:
  // The stage's layers are registered into optimizer.params() here, before the optimizer is built.
  StageRunner(const RunConfig& config, Backend& be, parallel::ProcessGroups& groups, const PrecisionPolicy& policy,
              const data::SetInfo& set, parallel::StageRange stage, DistributedOptimizer& optimizer,
              JobWatchdog& watchdog);

  const AVNet& net() const { return net_; }
  // parallel.cp > 1: the exchange between the parts of a sample's tokens; null at cp 1.
  const UlyssesExchange* context() const { return context_.get(); }

  // What this stage reads of a micro-batch: the first stage its inputs (and, alone, the labels),
  // the last stage the labels, a middle stage nothing.
  bool reads() const;
  data::Fields fields() const;

  // A step's forwards and backwards on this stage, in the schedule's order, with the transfers
  // between stages; the last micro-batch's backward launches each gradient bucket as soon as its
  // layers are done.
  void run_actions(StepWork& w);
  // Completes this rank's sends in flight to the neighbour stages.
  void finish_sends() { link_.finish_sends(); }

  // Evaluation: one micro-batch forward only, through the pipeline. `batch`: its samples where the
  // stage reads (null elsewhere); on the last stage its rows' logits and sets of classes appended to
  // `scores`, its loss x samples and correct count added to `sums`.
  void forward_only(std::future<data::MicroBatch>* batch, ScoreRows& scores, double sums[2]);

  // Once per step, every replica alike: the statistics the step's micro-batches gathered
  // (BatchNorm's) are added over the data-parallel group and folded into the running ones, so that
  // these are the same on every replica and in every layout of the same global batch.
  void fold_batch_statistics();

  // precision.mode fp8: the step's amaxes start being recorded (before its schedule); at its end,
  // every replica alike, they are reduced (MAX) over the data-parallel group and the scales updated.
  void begin_fp8_step() { fp8_.begin_step(); }
  void end_fp8_step();
  Fp8Linears& fp8() { return fp8_; }
  const Fp8Linears& fp8() const { return fp8_; }

  // Memory the slots hold for backward: what 1F1B keeps below GPipe.
  std::size_t activation_bytes() const;
  // Memory of the slots' tokens and their gradients.
  double flow_bytes() const;

 private:
  struct Slot {
    Flow flow;
    std::vector<std::unique_ptr<LayerState>> states;
    data::MicroBatch batch;
    bool busy = false;
  };

  void forward(StepWork& w, int m);
  void backward(StepWork& w, int m, bool last_of_step);
  void freeze_fp8_scale();
  template <class Receive>
  void wait_for_neighbour(StepWork& w, int m, const char* what, Receive receive);
  Slot& acquire();

  const RunConfig& config_;
  Backend& be_;
  parallel::ProcessGroups& groups_;
  const parallel::Topology& topo_;
  const PrecisionPolicy& policy_;
  DistributedOptimizer& optimizer_;
  ParamStore& params_;
  JobWatchdog& watchdog_;
  AVNet net_;
  Fp8Linears fp8_;  // the linears in FP8 (none outside precision.mode fp8)
  StageLink link_;
  // parallel.cp > 1: the Ulysses exchange over the context group, every micro-batch's flow's.
  std::unique_ptr<UlyssesExchange> context_;
  std::vector<parallel::PipeAction> actions_;  // this stage's forwards and backwards, in order
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> slot_of_;  // micro-batch -> its slot while in flight
  // The first stage's next micro-batch (next_m_ of this step; -1: none), collected at the end of the
  // forward before it so its samples' copy to the device runs beside that micro-batch's backward.
  data::MicroBatch next_batch_;
  int next_m_ = -1;
};

}  // namespace avtrain
