#pragma once
// Per-step numerics seen on the way: each leaf module's output |max| (layers.csv's act_absmax).
// The maxima are folded on the backend into slots in tensor memory (Backend::abs_max_into), so a
// GPU forward never waits for them; read() fetches them once, at the end of the step.
#include <cstddef>
#include <map>
#include <string>

#include "backend/backend.hpp"
#include "core/buffer.hpp"

namespace avtrain {

class ActivationStats {
 public:
  // Folds |max| of y[0, n) into module's slot (NaN stays NaN).
  void note(Backend& backend, const std::string& module, const float* y, std::size_t n);
  // The same for an operand: fp32 values, or a 16-bit copy read as its values (Backend::abs_max_into).
  void note(Backend& backend, const std::string& module, Operand y, std::size_t n);
  // Module -> |max| over every note of this object.
  std::map<std::string, float> read() const;

  static constexpr std::size_t kMaxModules = 4096;  // slots of one stage

 private:
  std::map<std::string, std::size_t> slot_of_;
  Buffer slots_;  // kMaxModules, zero until noted
};

}  // namespace avtrain
