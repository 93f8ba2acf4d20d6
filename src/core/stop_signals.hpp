#pragma once
// What ends a job on purpose, and the exit codes that say how it ended.
//
// SIGTERM, SIGUSR1 and SIGINT ask a run to stop early: the handler only records the signal (nothing
// else is safe in a handler); the trainer reads it once a step, agrees on it over the world (MAX),
// writes a checkpoint and exits with kExitStoppedEarly on every rank. A second SIGTERM or SIGINT
// kSecondSignalAfterMs or more after the first ends the process at once with 128 + the signal: the
// last committed checkpoint stands. One sooner is the same request arriving by a second route: a
// Slurm time limit or pre-emption signals every process of a step, and srun or mpirun (which waits
// odls_base_sigkill_timeout, 1 s, before it passes SIGTERM on) sends it to the ranks again.
#include <csignal>

namespace avtrain {

inline constexpr int kExitDone = 0;
inline constexpr int kExitFailed = 1;          // an error: bad input, a failed write, another rank's error
inline constexpr int kExitStoppedEarly = 75;   // a signal or the time budget: checkpoint committed, resume me
inline constexpr int kExitNoProgress = 124;    // the watchdog: a rank made no progress; the job was aborted
inline constexpr long kSecondSignalAfterMs = 2000;

// Installs the handlers (SA_RESTART: system calls in flight go on).
void install_stop_signals();
// The first stop signal received, or 0.
int stop_signal();
// From now on SIGTERM and SIGINT end the process at once with `code`: for a rank whose run has
// stopped with its checkpoint committed, which a launcher may terminate as the first rank to exit
// (mpirun ends the others when one exits non-zero) before it has exited by itself.
void exit_on_stop_signal(int code);
// "SIGTERM", "SIGUSR1", "SIGINT" (or "signal N").
const char* signal_name(int sig);
// Seconds since this process started (its static initialisation): what a time budget counts.
double seconds_since_start();

}  // namespace avtrain
