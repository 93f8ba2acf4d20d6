#pragma once
// trace.csv (one row per step), layers.csv (one row per step and layer) and ranks.csv (one row per
// step and rank), flushed every step so a killed run keeps what it wrote. Floats are written with %.9g and doubles with %.17g so they
// read back to the same bits.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace avtrain {

struct StepRow {
  std::int64_t step = 0;
  int epoch = 0;
  double loss = 0, grad_norm = 0, loss_scale = 1;
  int skipped = 0;
  float lr = 0;
  double step_ms = 0, data_wait_ms = 0, comm_ms = 0, samples_per_s = 0, mem_peak_mb = 0, act_mb = 0;
  double bubble = 0, bubble_theory = 0;
  std::optional<double> val_loss, val_acc;
};

// One rank's share of a step, as that rank measured it.
struct RankRow {
  std::int64_t step = 0;
  int rank = 0, pp_rank = 0, dp_rank = 0;
  std::optional<double> local_loss;  // last stage only: mean loss of this replica's micro-batches
  double loss_scale = 1;
  double grad_norm_local = 0;  // this rank's gradient over its stage, before the data-parallel all-reduce
  double act_mb = 0, step_ms = 0, schedule_ms = 0, idle_ms = 0, comm_ms = 0, data_wait_ms = 0;
  std::uint64_t grad_bytes = 0;  // payload bytes this rank handed to the gradient all-reduce
};

struct LayerRow {
  std::string layer;
  double grad_norm = 0, param_norm = 0;
  std::optional<float> act_absmax;
  double grad_underflow_frac = 0;
  std::uint64_t nonfinite = 0;
};

class TraceWriter {
 public:
  // Creates DIR (and parents) and starts the files with their headers. With continue_at >= 0 (a
  // resumed run) the files already there are kept up to the rows of step continue_at, which is
  // where the new rows go on: every step appears once.
  explicit TraceWriter(const std::string& dir, std::int64_t continue_at = -1);
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  void write_step(const StepRow& row);
  void write_layers(std::int64_t step, const std::vector<LayerRow>& rows);
  void write_ranks(const std::vector<RankRow>& rows);

  static const char* trace_header();
  static const char* layers_header();
  static const char* ranks_header();

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  using File = std::unique_ptr<std::FILE, Close>;
  std::string dir_;
  File trace_, layers_, ranks_;
};

}  // namespace avtrain
