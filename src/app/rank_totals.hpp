#pragma once
// Counters summed over the ranks while each rank works at its own pace: every call starts a
// non-blocking all-reduce ("tick") of this rank's counters and first completes the tick `lag` calls
// older, so a rank waits for the others only when it is `lag` ticks ahead. Every rank sees the sums
// of tick j in its call number j + lag, which lets all ranks stop after the same tick.
#include <cstdint>
#include <deque>
#include <vector>

#include <mpi.h>

namespace avtrain {

class RankTotals {
 public:
  RankTotals(MPI_Comm comm, int width, int lag);
  ~RankTotals();
  RankTotals(const RankTotals&) = delete;
  RankTotals& operator=(const RankTotals&) = delete;

  // Starts the next tick with `values` (width of them); returns the sums of the tick completed first
  // (empty while fewer than lag ticks are older).
  std::vector<std::int64_t> add(const std::vector<std::int64_t>& values);
  // Completes every tick in flight (without starting one).
  void finish();
  std::int64_t ticks() const { return started_; }

 private:
  struct Tick {
    std::vector<std::int64_t> mine, sum;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  void complete(Tick& tick);  // polls with short sleeps: an idle rank leaves its core to the working ones

  MPI_Comm comm_;
  int width_, lag_;
  std::int64_t started_ = 0;
  std::deque<Tick> in_flight_;
};

}  // namespace avtrain
