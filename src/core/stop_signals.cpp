#include "core/stop_signals.hpp"

#include <unistd.h>

#include <chrono>

namespace avtrain {
namespace {

volatile std::sig_atomic_t received = 0;
volatile std::sig_atomic_t exit_code = -1;  // >= 0: TERM and INT exit with it
const auto process_start = std::chrono::steady_clock::now();

extern "C" void on_stop_signal(int sig) {
  if (exit_code >= 0 && (sig == SIGTERM || sig == SIGINT)) _exit(exit_code);  // the run is over
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
