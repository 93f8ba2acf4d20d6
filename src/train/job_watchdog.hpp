#pragma once
// The watchdog of one rank of the job: its marks say what the rank is doing in the words of the
// step ("recv gradient of micro-batch 1 of step 12 from rank 3", "... (data-parallel group: ranks 0,
// 2)"), and when one lasts longer than the timeout it prints that line and ends the whole job (exit
// 124). The timeout is debug.watchdog_s, or automatic: what a normal step, evaluation or checkpoint
// never reach, and never under 300 s.
#include <cstdint>
#include <string>

#include "parallel/process_groups.hpp"
#include "train/run_config.hpp"
#include "train/run_record.hpp"
#include "train/watchdog.hpp"

namespace avtrain {

class JobWatchdog {
 public:
  JobWatchdog(const RunConfig& config, parallel::ProcessGroups& groups);

  // Progress: `phase` starts now.
  void mark(std::string phase) { watchdog_.mark(std::move(phase)); }
  // "<what> of micro-batch m of step s[ to/from rank peer]".
  enum class Peer { none, to, from };
  void mark_micro_batch(const char* what, std::int64_t step, int m, Peer direction = Peer::none, int peer = -1);
  // "<what> (all ranks: 0..3)": a phase every rank takes part in.
  void mark_all_ranks(const std::string& what);
  // "<what> (data-parallel group: ranks 0, 2)": a phase of this rank's replicas.
  void mark_data_group(const std::string& what);

  // The automatic timeout (debug.watchdog_s -1) from what the run has measured so far.
  void adapt_timeout(const RunRecord& record, double longest_checkpoint_s);

 private:
  const RunConfig& config_;
  parallel::ProcessGroups& groups_;
  const parallel::Topology& topo_;
  std::string all_ranks_, data_group_;
  Watchdog watchdog_;  // last: its thread may fire as soon as it exists
};

}  // namespace avtrain
