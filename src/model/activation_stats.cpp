#include "model/activation_stats.hpp"

#include <vector>

#include "core/error.hpp"

namespace avtrain {

void ActivationStats::note(Backend& backend, const std::string& module, const float* y, std::size_t n) {
  note(backend, module, fp32(y), n);
}

void ActivationStats::note(Backend& backend, const std::string& module, Operand y, std::size_t n) {
  if (slots_.size() == 0) slots_.resize(kMaxModules);  // zeroed, as tensor memory comes
  const auto [it, added] = slot_of_.emplace(module, slot_of_.size());
  require(it->second < kMaxModules, "internal: more than " + std::to_string(kMaxModules) + " modules on one stage");
  backend.abs_max_into(y, n, slots_.data() + it->second);
}

std::map<std::string, float> ActivationStats::read() const {
  std::map<std::string, float> absmax;
  if (slot_of_.empty()) return absmax;
  std::vector<float> values(slots_.size());
  slots_.download(values.data());
  for (const auto& [module, slot] : slot_of_) absmax[module] = values[slot];
  return absmax;
}

}  // namespace avtrain
