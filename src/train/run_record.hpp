#pragma once
// What a run leaves for its users besides its checkpoints: run.json, the traces (trace.csv,
// layers.csv, ranks.csv; docs/traces.md) and the progress line of a step in the log, with its ETA.
// Rank 0 writes them (the files only with --out). Every rank keeps the run's step and evaluation
// times: the ETA, the time budget and the watchdog's automatic timeout read them.
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/tensorboard_writer.hpp"
#include "io/trace_writer.hpp"
#include "parallel/topology.hpp"
#include "train/run_config.hpp"

namespace avtrain {

class RunRecord {
 public:
  RunRecord(const RunConfig& config, const parallel::Topology& topo);

  // run.json (rank 0, with --out): `manifest` with its "starts": those of the run.json already there
  // when the run resumes, then this start (time, step, ranks, layout, the Slurm job); written before
  // anything else, so that a start killed before its first checkpoint is known as this run's. Then
  // the traces, continued after first_step when the run resumes.
  void open(nlohmann::json manifest, bool resumed, std::int64_t first_step);

  // A step's rows into the traces and the TensorBoard events (rank 0, with --out).
  void write(const StepRow& row, const std::vector<LayerRow>& layers, const std::vector<RankRow>& ranks);

  // The times measured as the run goes.
  void step_took(double ms) { step_ms_.push_back(ms); }
  void evaluation_took(double s);
  const std::vector<double>& step_ms() const { return step_ms_; }
  double median_step_ms() const;
  // The median of the last 21 step times, in seconds; 0 before the first step. What the time
  // budget, the watchdog's automatic timeout and the ETA take a step to cost.
  double recent_step_s() const;
  double longest_evaluation_s() const { return longest_eval_s_; }

  // The progress line of a step (rank 0, every train.log_interval steps, after an evaluation and
  // after the last step): loss, grad norm, lr, step time, the layout's and precision's extras, the
  // time elapsed and the ETA. `skipped` >= 0 shows the loss scale and the steps it skipped.
  void log_step(std::ostream& log, const StepRow& row, int skipped, double elapsed_s) const;
  // What is left of the run after `step`: the median step over the steps to go, and the mean
  // evaluation over the evaluations to go (checkpoints are written beside training).
  double eta_s(std::int64_t step) const;

 private:
  const RunConfig& config_;
  const parallel::Topology& topo_;
  std::unique_ptr<TraceWriter> traces_;  // rank 0, with --out
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0, with --out and train.tensorboard
  std::vector<double> step_ms_;
  double longest_eval_s_ = 0, eval_s_ = 0;
  int evaluations_ = 0;
};

}  // namespace avtrain
