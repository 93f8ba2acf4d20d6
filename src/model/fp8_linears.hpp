#pragma once
// The FP8 linears of a stage under precision.mode fp8: each linear module precision.fp8_layers selects
// (less precision.fp32_layers; with precision.fp8_first_last_bf16, less the linears of the first and
// the last block) gets its Fp8LinearScaling here and multiplies in FP8. Once per step,
// every replica alike: the step's amaxes read back, reduced (MAX) over the data-parallel replicas —
// a NaN reaching every replica as NaN, an inf as inf — and the scales updated; the rest of what the
// step's casts did (layers.csv's fp8 columns) reduced too, so every replica holds the statistics of
// the whole global batch: the smallest non-zero |x| (MIN, in the same MAX reduction as its negative),
// the underflow and saturation counts and the values cast (SUM, a second reduction). Their states are part
// of a checkpoint, module by module (fp8/<module> in the file of the stage that holds it: any layout
// of stages and replicas loads them by name).
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/fp8_linear_scaling.hpp"
#include "model/linear.hpp"

namespace avtrain {

class Fp8Linears {
 public:
  Fp8Linears() = default;
  // `linears` in the stage's order; `selected(module)` says which multiply in FP8.
  Fp8Linears(const std::vector<Linear*>& linears, const std::function<bool(const std::string&)>& selected,
             const Fp8Recipe& recipe);

  bool empty() const { return scalings_.empty(); }
  std::vector<std::string> modules() const;
  const std::vector<std::unique_ptr<Fp8LinearScaling>>& scalings() const { return scalings_; }

  void begin_step();
  // `reduce_max(values, n)`, `reduce_sum(values, n)`: MAX and SUM of n doubles over the replicas, in
  // place (nothing for one replica).
  using Reduce = std::function<void(double*, std::size_t)>;
  void end_step(const Reduce& reduce_max, const Reduce& reduce_sum);

  // debug.fp8_freeze_scale: freezes the scales of `module` (Fp8LinearScaling::freeze); false when
  // no FP8 linear of this stage has that name.
  bool freeze(const std::string& module);

  // Module i's states (its x, w and dy scalings' Fp8DelayedScaling::state(), one after the other), of
  // state_size() floats; restore() takes them back (the scales then loaded).
  std::size_t state_size() const;
  std::vector<float> state(std::size_t i) const;
  // Throws Error when `state` is not of state_size() (a checkpoint of another precision.fp8_history).
  void restore(std::size_t i, const std::vector<float>& state);

  // Encodings of an amax for a MAX over replicas that keeps NaN above inf above every finite value.
  static double encode_amax(float amax);
  static float decode_amax(double code);

 private:
  std::vector<std::unique_ptr<Fp8LinearScaling>> scalings_;
};

}  // namespace avtrain
