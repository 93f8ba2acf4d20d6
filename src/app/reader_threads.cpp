#include "app/reader_threads.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace avtrain {

namespace {

// Ranks on this node as the launcher tells them, or 1.
int local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const int n = std::atoi(value);
    if (n >= 1) return n;
  }
  return 1;
}

}  // namespace

int default_reader_threads(bool cpu_run, int compute_threads) {
  cpu_set_t set;
  int cores = 1;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  if (cores >= all && local_ranks() > 1) cores = std::max(1, cores / local_ranks());
  return std::max(1, cpu_run ? cores - compute_threads : cores);
}

}  // namespace avtrain
