#pragma once
// One exception type for everything a user can act on; only main() turns it into an exit.
#include <cstddef>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>

namespace avtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown by a rank that stops because another rank found the error and reports it: main exits
// without printing a second message.
class ErrorElsewhere : public std::runtime_error {
 public:
  ErrorElsewhere() : std::runtime_error("stopped because another rank failed") {}
};

// Throws Error(message) when cond is false.
inline void require(bool cond, const std::string& message) {
  if (!cond) throw Error(message);
}

// Runs allocate(); an allocation that fails becomes one line naming what was being allocated and
// its size, and where to see a run's memory before starting it.
template <class Allocate>
void allocating(const std::string& what, double bytes, Allocate allocate) {
  try {
    allocate();
  } catch (const std::bad_alloc&) {
    std::ostringstream size;
    size.precision(bytes >= 1e9 ? 4 : 3);
    if (bytes >= double(1ull << 30)) size << bytes / double(1ull << 30) << " GiB";
    else size << bytes / double(1ull << 20) << " MiB";
    throw Error("out of memory allocating " + what + " (" + size.str() +
                "): --dry-run shows a run's memory per rank before it starts");
  }
}

}  // namespace avtrain
