#include "precision/fp8_layers.hpp"

#include "core/error.hpp"

namespace avtrain {

Fp8Layers::Fp8Layers(const PrecisionConfig& config)
    : fp8_mode_(config.mode == PrecisionMode::fp8), fp8_layers_(config.fp8_layers), fp32_layers_(config.fp32_layers) {}

bool Fp8Layers::in_fp8(const std::string& linear) {
  if (!fp8_mode_) return false;
  const bool listed = fp8_layers_.match(linear);  // match() first: it marks the globs used
  return listed && !fp32_layers_.match(linear);
}

void Fp8Layers::require_every_glob_used() const {
  if (!fp8_mode_) return;
  for (std::size_t i = 0; i < fp8_layers_.globs().size(); ++i)
    if (!fp8_layers_.used()[i])
      throw Error("precision.fp8_layers: '" + fp8_layers_.globs()[i] +
                  "' matches no linear module (they are named like blocks.0.attn.qkv, blocks.0.mlp.fc2, head.cls)");
}

}  // namespace avtrain
