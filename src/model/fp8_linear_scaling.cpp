#include "model/fp8_linear_scaling.hpp"

#include <utility>

#include "core/error.hpp"

namespace avtrain {

Fp8LinearScaling::Fp8LinearScaling(std::string module, const Fp8Recipe& recipe)
    : module_(std::move(module)),
      scalings_{Fp8DelayedScaling(Fp8Format::e4m3, recipe), Fp8DelayedScaling(Fp8Format::e4m3, recipe),
                Fp8DelayedScaling(Fp8Format::e5m2, recipe)} {}

void Fp8LinearScaling::load_scales() {
  for (int r = 0; r < kRoles; ++r) loaded_[r] = scalings_[r].scale();
  scales_.upload(loaded_.data(), kRoles);
}

void Fp8LinearScaling::begin_step() {
  if (scales_.size() != kRoles) load_scales();
  casts_.resize(kRoles);
  casts_.zero();  // all zeros: nothing cast yet (Fp8CastStats)
  counted_ = {};
  recording_ = true;
}

Operand Fp8LinearScaling::quantize(Backend& be, Role role, Operand values, std::size_t n, Mask& codes,
                                   Buffer& scratch, bool record) {
  require(scales_.size() == kRoles, "internal: " + module_ + ": FP8 quantize before the scales were loaded");
  if (values.dtype != DType::f32) scratch.resize(n);
  const Fp8DelayedScaling& scaling = scalings_[int(role)];
  if (!scaling.has_history() && !scaling.frozen()) {  // no delayed scale yet: this use's own (see the header)
    loaded_[int(role)] = scaling.scale_for(be.abs_max(values, n));
    scales_.upload(loaded_.data(), kRoles);
  }
  codes.resize(n);
  float* scale = scales_.data() + int(role);
  const bool counted = record && recording_;
  be.quantize(values, {codes.data(), type_of(role), scale}, n, counted ? casts_.data() + int(role) : nullptr,
              values.dtype != DType::f32 ? scratch.data() : nullptr);
  if (counted) counted_[int(role)] += double(n);
  return {codes.data(), type_of(role), scale};
}

void Fp8LinearScaling::end_step() {
  require(recording_, "internal: " + module_ + ": FP8 step ended before it began");
  recording_ = false;
  std::array<Fp8CastStats, kRoles> cast{};
  casts_.download(cast.data());
  for (int r = 0; r < kRoles; ++r) {
    scalings_[r].record(cast[r].amax);
    step_[r] = {cast[r], counted_[r], cast_scale(Role(r), cast[r].amax)};
  }
}

void Fp8LinearScaling::update() {
  for (Fp8DelayedScaling& s : scalings_) s.update();
  load_scales();
}

float Fp8LinearScaling::cast_scale(Role r, float step_amax) const {
  const Fp8DelayedScaling& s = scalings_[int(r)];
  return s.has_history() || s.frozen() ? s.scale() : s.scale_for(step_amax);
}

void Fp8LinearScaling::freeze() {
  for (Fp8DelayedScaling& s : scalings_) s.freeze();
}

}  // namespace avtrain
