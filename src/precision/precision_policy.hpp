#pragma once
// Which type each module computes and stores in. Mixed precision means: matrix products take
// fp16/bf16 operands and accumulate in fp32, and each module's outputs (and, going back, its input
// gradients) are rounded to that type; normalisation statistics, softmax, reductions and losses
// are computed in fp32 whatever the type. Modules whose names match a pattern of
// precision.fp32_layers stay wholly in fp32.
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "precision/precision_config.hpp"

namespace avtrain {

class PrecisionPolicy {
 public:
  PrecisionPolicy() = default;  // fp32 everywhere
  explicit PrecisionPolicy(const PrecisionConfig& config);

  DType compute() const { return compute_; }
  // The type of the module called `module` ("blocks.0.attn.qkv").
  DType of(const std::string& module) const;
  // Patterns that matched no module asked about so far: a typo to report.
  std::vector<std::string> unused_patterns() const;

 private:
  DType compute_ = DType::f32;
  std::vector<std::string> patterns_;
  mutable std::vector<bool> used_;
};

}  // namespace avtrain
