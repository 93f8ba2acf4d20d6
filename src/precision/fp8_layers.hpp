#pragma once
// Which linear modules take their products in FP8 under precision.mode fp8: those a glob of
// precision.fp8_layers matches and no glob of precision.fp32_layers does (a module kept wholly in fp32
// is in fp32). Under any other mode none is.
#include <string>

#include "core/name_globs.hpp"
#include "precision/precision_config.hpp"

namespace avtrain {

class Fp8Layers {
 public:
  explicit Fp8Layers(const PrecisionConfig& config);
  // Whether the linear module `linear` ("blocks.0.attn.qkv") multiplies in FP8; marks the globs of
  // precision.fp8_layers that match it as used. With precision.fp8_first_last_bf16, the linears of
  // blocks.0 and of blocks.<depth - 1> (model.depth blocks) are not.
  bool in_fp8(const std::string& linear, int depth = 0);
  // A module of the model that is not a linear (LayerNorm, the audio front end): marks the globs of
  // precision.fp8_layers that match it as used, so a glob naming a group of modules (blocks.0.*,
  // audio.bn) is no typo; such a module stays out of FP8.
  void note_module(const std::string& module);
  // Under mode fp8, after every module has been asked about or noted: throws Error naming the first
  // glob of precision.fp8_layers that matched none (a typo would otherwise leave layers in bf16 unseen).
  void require_every_glob_used() const;

 private:
  bool fp8_mode_, first_last_bf16_;
  NameGlobs fp8_layers_, fp32_layers_;
};

}  // namespace avtrain
