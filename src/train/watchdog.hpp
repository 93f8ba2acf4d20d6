#pragma once
// A rank that makes no progress ends the job with a message instead of hanging it until the job's
// time runs out. The step loop marks what it is doing ("recv gradient of micro-batch 1 from rank
// 3", "waiting for data: micro-batch 0 of step 12"); a thread looks every half second, and when one
// mark has lasted longer than the timeout it calls `fire` once with one line: the phase and how
// long. A mark costs a lock and a string.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace avtrain {

class Watchdog {
 public:
  using Fire = std::function<void(const std::string& line)>;
  explicit Watchdog(Fire fire);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Seconds a mark may last; 0: off.
  void set_timeout(double seconds);
  double timeout() const;
  // Progress: `phase` starts now.
  void mark(std::string phase);

 private:
  using Clock = std::chrono::steady_clock;
  void watch();

  Fire fire_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::string phase_ = "starting";
  Clock::time_point since_ = Clock::now();
  double timeout_s_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything it reads exists
};

}  // namespace avtrain
