#pragma once
// A Chrome-trace (chrome://tracing, Perfetto) timeline of a run: each rank records its spans
// (forward, backward, send, recv, all-reduce, optimizer, ...) in memory; rank 0 gathers the
// ranks' event lists and writes one JSON file with one track (pid) per rank.
#include <chrono>
#include <string>
#include <vector>

namespace avtrain {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  // Times are microseconds since `epoch` (take it right after a barrier so the ranks' tracks line up).
  // pid is this rank: the track its events go on. A disabled timeline records nothing and costs nothing.
  Timeline(bool enabled, Clock::time_point epoch, int pid);
  bool enabled() const { return enabled_; }
  // One complete event ("ph":"X") on this rank's track. category: forward, backward, send, recv,
  // allreduce, optimizer, data, eval, ... ; step and micro_batch go into its args unless -1.
  void span(const std::string& name, const char* category, Clock::time_point begin, Clock::time_point end,
            long step = -1, int micro_batch = -1);
  // This rank's events as the items of a JSON array, without the brackets ("" when none): what is
  // gathered to rank 0.
  std::string events_json() const;

  // Writes {"traceEvents": [...], "displayTimeUnit": "ms"} to `path` (temporary name, then rename):
  // per_rank[r] is rank r's events_json(); track names are the labels ("rank 3 (stage 1, replica 1)").
  static void write(const std::string& path, const std::vector<std::string>& per_rank,
                    const std::vector<std::string>& labels);

 private:
  bool enabled_;
  Clock::time_point epoch_;
  int pid_;
  std::string events_;  // JSON objects separated by commas
};

}  // namespace avtrain
