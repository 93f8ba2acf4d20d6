#include "train/watchdog.hpp"

#include <cmath>
#include <sstream>

namespace avtrain {

Watchdog::Watchdog(Fire fire) : fire_(std::move(fire)), thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void Watchdog::set_timeout(double seconds) {
  const std::lock_guard lock(mutex_);
  timeout_s_ = seconds;
}

double Watchdog::timeout() const {
  const std::lock_guard lock(mutex_);
  return timeout_s_;
}

void Watchdog::mark(std::string phase) {
  const std::lock_guard lock(mutex_);
  phase_ = std::move(phase);
  since_ = Clock::now();
}

void Watchdog::watch() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stopping_; })) {
    if (timeout_s_ <= 0) continue;
    const double quiet = std::chrono::duration<double>(Clock::now() - since_).count();
    if (quiet < timeout_s_) continue;
    std::ostringstream line;
    line << "watchdog: no progress for " << std::lround(quiet) << " s (debug.watchdog_s " << timeout_s_
         << ") in: " << phase_;
    const std::string message = line.str();
    lock.unlock();
    fire_(message);  // ends the job; if it returns, the watchdog is done
    return;
  }
}

}  // namespace avtrain
