#pragma once
// What one step's phases read and add to, on one rank: its micro-batches, the loss scale it runs
// with, what its forwards measured (the loss, the activations' statistics and memory) and this
// rank's row of ranks.csv, filled in as the step goes.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <vector>

#include "data/shard_set.hpp"
#include "io/timeline.hpp"
#include "io/trace_writer.hpp"
#include "model/activation_stats.hpp"

namespace avtrain {

struct StepWork {
  using Clock = std::chrono::steady_clock;
  static double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  explicit StepWork(std::int64_t s) : step(s) {}
  std::int64_t step;
  Clock::time_point start;
  std::vector<std::future<data::MicroBatch>> parts;  // this replica's micro-batches (stages that read)
  double loss_scale = 1;
  float grad_scale = 1;
  bool inject_overflow = false;  // debug.inject_overflow: an inf in this rank's gradients this step
  Timeline* timeline = nullptr;
  ActivationStats acts;
  double local_loss = 0, train_ms = 0;
  // parallel.cp: the exchange's totals when the step began (its bytes and seconds since the start).
  std::uint64_t cp_bytes_before = 0;
  double cp_seconds_before = 0;
  bool loss_finite = true;
  std::size_t act_bytes = 0;
  RankRow row;  // this rank's row of ranks.csv, measured as the step goes (io/trace_columns.hpp)
};

}  // namespace avtrain
