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
  amaxes_.resize(kRoles);
  amaxes_.zero();
  recording_ = true;
}

Operand Fp8LinearScaling::quantize(Backend& be, Role role, Operand values, std::size_t n, Mask& codes,
                                   Buffer& scratch, bool record) {
  require(scales_.size() == kRoles, "internal: " + module_ + ": FP8 quantize before the scales were loaded");
  const float* fp32_values = static_cast<const float*>(values.data);
  if (values.dtype != DType::f32) {
    scratch.resize(n);
    be.unpack(values, scratch.data(), n);
    fp32_values = scratch.data();
  }
  if (record && recording_) be.abs_max_into(values, n, amaxes_.data() + int(role));
  const Fp8DelayedScaling& scaling = scalings_[int(role)];
  if (!scaling.has_history()) {  // no delayed scale yet: this use's own (see the header)
    loaded_[int(role)] = scaling.scale_for(be.abs_max(values, n));
    scales_.upload(loaded_.data(), kRoles);
  }
  codes.resize(n);
  float* scale = scales_.data() + int(role);
  be.pack(fp32_values, {codes.data(), type_of(role), scale}, n);
  return {codes.data(), type_of(role), scale};
}

void Fp8LinearScaling::end_step() {
  require(recording_, "internal: " + module_ + ": FP8 step ended before it began");
  recording_ = false;
  std::array<float, kRoles> amax{};
  amaxes_.download(amax.data());
  for (int r = 0; r < kRoles; ++r) scalings_[r].record(amax[r]);
}

void Fp8LinearScaling::update() {
  for (Fp8DelayedScaling& s : scalings_) s.update();
  load_scales();
}

}  // namespace avtrain
