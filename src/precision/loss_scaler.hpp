#pragma once
// Loss scaling for fp16: the loss is multiplied by scale() before backward, gradients are divided
// by it after accumulation. Dynamic scaling follows PyTorch's GradScaler (a step with a non-finite
// gradient is skipped and the scale backs off; growth after growth_interval clean steps), with
// Megatron/DeepSpeed's hysteresis (back off only after `hysteresis` overflows) and minimum scale
// (an overflow at the minimum stops the run).
#include <cstdint>
#include <string>

#include "core/dtype.hpp"
#include "precision/precision_config.hpp"

namespace avtrain {

class LossScaler {
 public:
  enum class Kind { none, fixed, dynamic };
  // Resolves loss_scale = auto for the compute type; throws naming precision.* options.
  LossScaler(const PrecisionConfig& config, DType compute);

  Kind kind() const { return kind_; }
  double scale() const { return scale_; }
  // Called once per step with the step's found_inf (agreed over every rank). Returns whether the
  // step's update is applied; a skipped step is counted.
  bool update(bool found_inf, std::int64_t step);
  std::int64_t skipped() const { return skipped_; }
  std::string describe() const;

  // What a checkpoint holds; restore() continues exactly where state() was taken.
  struct State {
    double scale = 1;
    int growth_tracker = 0, hysteresis_tracker = 1;
    std::int64_t skipped = 0;
  };
  State state() const { return {scale_, growth_tracker_, hysteresis_tracker_, skipped_}; }
  void restore(const State& s) {
    scale_ = s.scale;
    growth_tracker_ = s.growth_tracker;
    hysteresis_tracker_ = s.hysteresis_tracker;
    skipped_ = s.skipped;
  }

 private:
  Kind kind_ = Kind::none;
  double scale_ = 1, growth_ = 2, backoff_ = 0.5, min_scale_ = 1;
  int interval_ = 2000, hysteresis_ = 1;
  int growth_tracker_ = 0, hysteresis_tracker_ = 1;
  std::int64_t skipped_ = 0;
};

}  // namespace avtrain
