#pragma once
// The FP8 side of one linear module under precision.mode fp8 (Transformer Engine's recipe): a delayed
// scaling for each tensor its products quantize, x and W in E4M3 (forward; W again in dgrad, x in
// wgrad) and dy in E5M2 (backward); their scales in tensor memory, fixed for a step; the amaxes the
// step's micro-batches fold in there (abs_max_into), read back once at the step's end.
// Per step: begin_step(); the module's forwards and backwards (quantize()); end_step() reads the
// amaxes back into the scalings (record); the caller may reduce each scaling's step_amax() over the
// data-parallel replicas; update() (the new scales into tensor memory). Outside a step (evaluation)
// the products use the scales as they are and record nothing.
// A tensor whose scaling has no amax history yet (a fresh start's first step, or a tensor no step has
// seen) is quantized with a scale taken just in time from its own amax in this use
// (Fp8DelayedScaling::scale_for), not with the first scale of 1, at which small gradients underflow
// to zero in E5M2. Each use depends only on its own values (its micro-batch): every layout of
// micro-batches over replicas and stages quantizes alike (dy, seeded with 1 / micro-batches per
// replica, a power of 2 apart: its scale too, the same codes), and the step's amaxes still go to the
// history as in any step (MAX over micro-batches and replicas), so that the next step's scales are
// every layout's.
#include <array>
#include <string>

#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "precision/fp8_scaling.hpp"

namespace avtrain {

class Fp8LinearScaling {
 public:
  enum class Role : int { x = 0, w = 1, dy = 2 };
  static constexpr int kRoles = 3;
  static constexpr std::array<const char*, kRoles> kRoleNames = {"x", "w", "dy"};
  static constexpr DType type_of(Role r) { return r == Role::dy ? DType::e5m2 : DType::e4m3; }

  Fp8LinearScaling(std::string module, const Fp8Recipe& recipe);

  const std::string& module() const { return module_; }
  Fp8DelayedScaling& scaling(Role r) { return scalings_[int(r)]; }
  const Fp8DelayedScaling& scaling(Role r) const { return scalings_[int(r)]; }

  // The scales into tensor memory (the memory in use: call it within the run's scope): at the start,
  // after a restore of the scalings, and by update().
  void load_scales();
  // The amaxes zeroed, recording on (the scales loaded where they were not yet).
  void begin_step();
  // The fp8 codes of `role`'s tensor, n values (fp32, or a 16-bit copy read as its values), quantized
  // with the step's scale into `codes` (resized); `scratch` takes a 16-bit tensor's fp32 values. Where
  // `record` and within a step, the tensor's amax is folded into the step's. The same tensor quantized again within a
  // step gives the same codes (the scale is fixed, or taken just in time from the same values):
  // backward quantizes forward's x and W again. The returned operand's scale is valid until the next
  // quantize of `role` (a just-in-time scale is rewritten there) or update().
  Operand quantize(Backend& be, Role role, Operand values, std::size_t n, Mask& codes, Buffer& scratch,
                   bool record);
  // The step's amaxes read back and recorded into the scalings (NaN where a tensor held one).
  void end_step();
  // Each scaling's update() (after the caller's reduction of the step amaxes), then load_scales().
  void update();

 private:
  std::string module_;
  std::array<Fp8DelayedScaling, kRoles> scalings_;
  Buffer scales_, amaxes_;              // kRoles floats each, tensor memory
  std::array<float, kRoles> loaded_{};  // scales_'s values on the host
  bool recording_ = false;  // within a step
};

}  // namespace avtrain
