#include "train/time_budget.hpp"

#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "core/stop_signals.hpp"

namespace avtrain {

TimeBudget::TimeBudget(double max_minutes) {
  if (max_minutes > 0) {
    deadline_s_ = max_minutes * 60.0;
    std::ostringstream s;
    s << max_minutes;
    source_ = "train.max_minutes " + s.str();
  }
  if (const char* end = std::getenv("SLURM_JOB_END_TIME"); end && std::atof(end) > 0) {
    const double at = seconds_since_start() + (std::atof(end) - double(std::time(nullptr)));
    if (at < deadline_s_) {
      deadline_s_ = at;
      source_ = "the Slurm job's end time";
    }
  }
}

bool TimeBudget::out_of_time(const Margin& margin) const {
  return limited() && seconds_since_start() + margin.total() >= deadline_s_;
}

std::string TimeBudget::note(const Margin& m) const {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << seconds_since_start() << " s of " << deadline_s_
    << " s used; the rest no longer covers 2 steps (" << m.steps << " s), the longest evaluation (" << m.evaluation
    << " s), a checkpoint (" << m.checkpoint << " s) and " << m.spare << " s";
  return s.str();
}

}  // namespace avtrain
