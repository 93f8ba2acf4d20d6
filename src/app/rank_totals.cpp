#include "app/rank_totals.hpp"

#include <chrono>
#include <thread>

namespace avtrain {

RankTotals::RankTotals(MPI_Comm comm, int width, int lag) : comm_(comm), width_(width), lag_(lag < 1 ? 1 : lag) {}

RankTotals::~RankTotals() {
  // A tick left in flight (an exception on the way out) is completed or the job is ending anyway.
  for (Tick& tick : in_flight_)
    if (tick.request != MPI_REQUEST_NULL) MPI_Request_free(&tick.request);
}

void RankTotals::complete(Tick& tick) {
  int done = 0;
  for (int polls = 0;; ++polls) {
    MPI_Test(&tick.request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(polls < 100 ? std::chrono::microseconds(100) : std::chrono::milliseconds(2));
  }
}

std::vector<std::int64_t> RankTotals::add(const std::vector<std::int64_t>& values) {
  std::vector<std::int64_t> result;
  if (std::int64_t(in_flight_.size()) >= lag_) {
    complete(in_flight_.front());
    result = std::move(in_flight_.front().sum);
    in_flight_.pop_front();
  }
  Tick& tick = in_flight_.emplace_back();
  tick.mine = values;
  tick.mine.resize(std::size_t(width_), 0);
  tick.sum.assign(std::size_t(width_), 0);
  MPI_Iallreduce(tick.mine.data(), tick.sum.data(), width_, MPI_INT64_T, MPI_SUM, comm_, &tick.request);
  ++started_;
  return result;
}

void RankTotals::finish() {
  for (Tick& tick : in_flight_) complete(tick);
  in_flight_.clear();
}

}  // namespace avtrain
