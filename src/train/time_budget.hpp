#pragma once
// A run's time budget: train.max_minutes from the process's start, and a Slurm job's end time where
// Slurm tells it (SLURM_JOB_END_TIME, seconds since the epoch), whichever comes first. The run
// stops with a checkpoint once the time left no longer covers its margin: two steps, the longest
// evaluation, a checkpoint and 5 s, measured as the run goes.
#include <limits>
#include <string>

namespace avtrain {

class TimeBudget {
 public:
  explicit TimeBudget(double max_minutes);
  bool limited() const { return deadline_s_ < std::numeric_limits<double>::infinity(); }
  // What set the deadline, for the log: "train.max_minutes 5" or "the Slurm job's end time".
  const std::string& source() const { return source_; }

  // What the time left must cover before the deadline, in seconds.
  struct Margin {
    double steps = 0, evaluation = 0, checkpoint = 0, spare = 5.0;
    double total() const { return steps + evaluation + checkpoint + spare; }
  };
  // Whether the time left (from the process's start) no longer covers `margin`.
  bool out_of_time(const Margin& margin) const;
  // The log's account of a stop on the budget: the time used and what the rest had to cover.
  std::string note(const Margin& margin) const;

 private:
  double deadline_s_ = std::numeric_limits<double>::infinity();  // seconds since the process started
  std::string source_;
};

}  // namespace avtrain
