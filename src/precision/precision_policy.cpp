#include "precision/precision_policy.hpp"

#include <fnmatch.h>

#include <sstream>

namespace avtrain {

PrecisionPolicy::PrecisionPolicy(const PrecisionConfig& config) : compute_(compute_type(config.mode)) {
  std::istringstream list(config.fp32_layers);
  for (std::string p; std::getline(list, p, ',');) {
    const auto first = p.find_first_not_of(" \t"), last = p.find_last_not_of(" \t");
    if (first != std::string::npos) patterns_.push_back(p.substr(first, last - first + 1));
  }
  used_.assign(patterns_.size(), false);
}

DType PrecisionPolicy::of(const std::string& module) const {
  bool fp32 = compute_ == DType::f32;
  for (std::size_t i = 0; i < patterns_.size(); ++i)
    if (fnmatch(patterns_[i].c_str(), module.c_str(), 0) == 0) used_[i] = fp32 = true;
  return fp32 ? DType::f32 : compute_;
}

std::vector<std::string> PrecisionPolicy::unused_patterns() const {
  std::vector<std::string> unused;
  for (std::size_t i = 0; i < patterns_.size(); ++i)
    if (!used_[i]) unused.push_back(patterns_[i]);
  return unused;
}

}  // namespace avtrain
