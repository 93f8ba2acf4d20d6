#pragma once
// One exception type for everything a user can act on; only main() turns it into an exit.
#include <stdexcept>
#include <string>

namespace avtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws Error(message) when cond is false.
inline void require(bool cond, const std::string& message) {
  if (!cond) throw Error(message);
}

}  // namespace avtrain
