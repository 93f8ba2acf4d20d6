#pragma once
// The faults a test injects on purpose (debug.*, each "RANK:STEP"), as this rank sees them: an inf
// in its gradients in a step's first backward (debug.inject_overflow), its first weight moved after
// a step's update (debug.perturb_weights), its data for a step that never arrives
// (debug.stall_reader, the watchdog's test).
#include <cstdint>
#include <utility>

#include "backend/backend.hpp"
#include "model/param_store.hpp"
#include "train/run_config.hpp"

namespace avtrain {

class DebugFaults {
 public:
  DebugFaults(const DebugConfig& debug, int rank);

  bool overflows_at(std::int64_t step) const { return inject_overflow_.first == rank_ && inject_overflow_.second == step; }
  // The first gradient of the stage set to +inf.
  static void overflow(Backend& be, ParamStore& params);
  // debug.perturb_weights: after `step`'s update, this rank's first weight moved by 1e-3.
  void perturb_if_due(Backend& be, ParamStore& params, std::int64_t step) const;
  // The step whose first micro-batch this rank's reader never delivers, or -1 (read when the feed
  // starts, so a malformed value stops the run there).
  std::int64_t stall_reader_at() const;

 private:
  const DebugConfig& debug_;
  int rank_;
  std::pair<int, std::int64_t> inject_overflow_, perturb_weights_;  // {-1, -1}: none
};

}  // namespace avtrain
