#include "train/job_watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/exit_status_file.hpp"
#include "core/stop_signals.hpp"

namespace avtrain {

namespace {
constexpr double kWatchdogFloor = 300.0;  // seconds: the automatic watchdog never fires sooner

std::string all_ranks_of(const parallel::Topology& topo) {
  return topo.world <= 8 ? "all ranks: 0.." + std::to_string(topo.world - 1) : "all " + std::to_string(topo.world) + " ranks";
}
std::string data_group_of(const parallel::Topology& topo) {
  std::string ranks;
  for (int r = 0; r < topo.stage_size(); ++r) ranks += (r ? ", " : "") + std::to_string(topo.pp_rank * topo.stage_size() + r);
  return "data-parallel group: ranks " + ranks;
}
}  // namespace

// The watchdog's last word: its line, then a few seconds in which the other ranks' watchdogs (their
// waits began within a step of this one's) print theirs, then the job ends.
JobWatchdog::JobWatchdog(const RunConfig& config, parallel::ProcessGroups& groups)
    : config_(config), groups_(groups), topo_(groups.topology), all_ranks_(all_ranks_of(topo_)),
      data_group_(data_group_of(topo_)), watchdog_([this](const std::string& line) {
        std::fprintf(stderr, "avtrain: rank %d: %s; aborting the job (exit %d)\n", topo_.rank, line.c_str(), kExitNoProgress);
        std::fflush(stderr);
        // Before the wait: a launcher that lost a node may end this rank during it, or never report 124.
        record_exit_status(kExitNoProgress, topo_.rank);
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(5.0, watchdog_.timeout())));
        groups_.world->abort_job(kExitNoProgress);
      }) {
  watchdog_.set_timeout(config.debug.watchdog_s >= 0 ? config.debug.watchdog_s : kWatchdogFloor);
}

void JobWatchdog::mark_micro_batch(const char* what, std::int64_t step, int m, Peer direction, int peer) {
  std::string phase = std::string(what) + " of micro-batch " + std::to_string(m) + " of step " + std::to_string(step);
  if (direction != Peer::none) phase += (direction == Peer::to ? " to rank " : " from rank ") + std::to_string(peer);
  watchdog_.mark(std::move(phase));
}

void JobWatchdog::mark_all_ranks(const std::string& what) { watchdog_.mark(what + " (" + all_ranks_ + ")"); }

void JobWatchdog::mark_data_group(const std::string& what) { watchdog_.mark(what + " (" + data_group_ + ")"); }

void JobWatchdog::adapt_timeout(const RunRecord& record, double longest_checkpoint_s) {
  if (config_.debug.watchdog_s >= 0) return;
  watchdog_.set_timeout(std::max({kWatchdogFloor, 20 * record.recent_step_s(), 3 * record.longest_evaluation_s(),
                                  3 * longest_checkpoint_s}));
}

}  // namespace avtrain
