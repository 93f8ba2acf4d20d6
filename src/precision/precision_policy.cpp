#include "precision/precision_policy.hpp"

#include <fnmatch.h>

#include <sstream>

#include "core/error.hpp"

namespace avtrain {

DType parse_dtype(const std::string& name, const std::string& option) {
  if (name == "fp32") return DType::f32;
  if (name == "fp16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  throw Error(option + ": '" + name + "' is not one of fp32, fp16, bf16");
}

PrecisionPolicy::PrecisionPolicy(const PrecisionConfig& config)
    : compute_(parse_dtype(config.mode, "precision.mode")) {
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
