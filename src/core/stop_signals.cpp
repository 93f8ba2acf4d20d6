#include "core/stop_signals.hpp"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>

namespace avtrain {
namespace {

volatile std::sig_atomic_t received = 0;
volatile std::sig_atomic_t exit_code = -1;  // >= 0: TERM and INT exit with it
std::atomic<std::int64_t> first_at_ms{0};   // when the first stop signal came (CLOCK_MONOTONIC)
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "read and written in a signal handler");
const auto process_start = std::chrono::steady_clock::now();

std::int64_t monotonic_ms() {  // clock_gettime is async-signal-safe
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

extern "C" void on_stop_signal(int sig) {
  const bool ends = sig == SIGTERM || sig == SIGINT;
  if (exit_code >= 0 && ends) _exit(exit_code);  // the run is over
  if (received != 0) {
    // Asked twice: now. A repeat sooner is the first request by another route (Slurm signals every
    // process of a step, and srun or mpirun passes the signal on again).
    if (ends && monotonic_ms() - first_at_ms.load() >= kSecondSignalAfterMs) _exit(128 + sig);
    return;
  }
  first_at_ms.store(monotonic_ms());
  received = sig;
}

}  // namespace

void install_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaction(sig, &action, nullptr);
}

int stop_signal() { return received; }

void exit_on_stop_signal(int code) { exit_code = code; }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

double seconds_since_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - process_start).count();
}

}  // namespace avtrain
