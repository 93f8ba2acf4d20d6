#include "precision/fp8_layers.hpp"

#include "core/error.hpp"

namespace avtrain {

Fp8Layers::Fp8Layers(const PrecisionConfig& config)
    : fp8_mode_(config.mode == PrecisionMode::fp8), first_last_bf16_(config.fp8_first_last_bf16), fp8_layers_(config.fp8_layers), fp32_layers_(config.fp32_layers) {}

bool Fp8Layers::in_fp8(const std::string& linear, int depth) {
  if (!fp8_mode_) return false;
  const bool listed = fp8_layers_.match(linear);  // match() first: it marks the globs used
  const std::string first = "blocks.0.", last = "blocks." + std::to_string(depth - 1) + ".";
  const bool edge = linear.rfind(first, 0) == 0 || (depth > 0 && linear.rfind(last, 0) == 0);
  return listed && !fp32_layers_.match(linear) && !(first_last_bf16_ && edge);
}

void Fp8Layers::note_module(const std::string& module) {
  if (fp8_mode_) fp8_layers_.match(module);
}

void Fp8Layers::require_every_glob_used() const {
  if (!fp8_mode_) return;
  for (std::size_t i = 0; i < fp8_layers_.globs().size(); ++i)
    if (!fp8_layers_.used()[i])
      throw Error("precision.fp8_layers: '" + fp8_layers_.globs()[i] +
                  "' matches no module (they are named like blocks.0.attn.qkv, blocks.0.mlp.fc2, head.cls)");
}

}  // namespace avtrain
