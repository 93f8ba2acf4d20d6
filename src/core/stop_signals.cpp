#include "core/stop_signals.hpp"

#include <unistd.h>

#include <chrono>

namespace avtrain {
namespace {

volatile std::sig_atomic_t received = 0;
const auto process_start = std::chrono::steady_clock::now();

extern "C" void on_stop_signal(int sig) {
  if (received != 0 && (sig == SIGTERM || sig == SIGINT)) _exit(128 + sig);  // asked twice: now
  if (received == 0) received = sig;
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
