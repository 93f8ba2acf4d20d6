#include "core/exit_status_file.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/atomic_file.hpp"

namespace avtrain {

void record_exit_status(int code, int rank) {
  const char* path = std::getenv("AVTRAIN_EXIT_STATUS_FILE");
  if (rank != 0 || path == nullptr || *path == '\0') return;
  try {
    write_file_atomically(path, std::to_string(code) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "avtrain: rank 0: AVTRAIN_EXIT_STATUS_FILE: %s\n", e.what());
  }
}

}  // namespace avtrain
