#pragma once
// The [precision] section of a deck: compute type, the layers kept in fp32, loss scaling, and the
// FP8 products' delayed scaling.
#include <cstdlib>
#include <optional>
#include <string>

#include "core/dtype.hpp"
#include "core/enum_names.hpp"
#include "core/stochastic_round.hpp"

namespace avtrain {

// precision.mode: fp32, fp16 or bf16 name the compute type of products and activations; fp8 is bf16
// everywhere with the products of the linears in FP8 (E4M3 forward, E5M2 gradients, docs/precision.md).
enum class PrecisionMode : unsigned char { fp32, fp16, bf16, fp8 };
constexpr EnumNames<PrecisionMode, 4> enum_names(PrecisionMode) {
  return {{{PrecisionMode::fp32, "fp32"}, {PrecisionMode::fp16, "fp16"}, {PrecisionMode::bf16, "bf16"},
           {PrecisionMode::fp8, "fp8"}}};
}
// The type activations are stored in and products not in FP8 are taken in.
constexpr DType compute_type(PrecisionMode m) {
  return m == PrecisionMode::fp32 ? DType::f32 : m == PrecisionMode::fp16 ? DType::f16 : DType::bf16;
}

// precision.fp8_amax: the amax a scale is computed from, the largest in the history window or the
// last step's (Transformer Engine's amax_compute_algo).
enum class Fp8Amax : unsigned char { max, most_recent };
constexpr EnumNames<Fp8Amax, 2> enum_names(Fp8Amax) {
  return {{{Fp8Amax::max, "max"}, {Fp8Amax::most_recent, "most_recent"}}};
}

// precision.fp8_margin's largest value: with a margin of 19 an E4M3 tensor's amax, mapped to
// 448 / 2^19, is below half the smallest E4M3 value and quantizes to 0.
constexpr int kFp8MarginMax = 18;

// precision.loss_scale: auto (fp16: dynamic, else none), dynamic, none, or a fixed positive scale.
struct LossScale {
  enum class Kind { automatic, dynamic, none, fixed };
  Kind kind = Kind::automatic;
  double fixed = 0;     // Kind::fixed: the scale
  std::string written;  // Kind::fixed: the number as written, what run.json shows

  // A word of Kind, or a number in (0, 3e38]; nullopt for anything else.
  static std::optional<LossScale> parse(const std::string& text);
  // What the option reads back: the word, or the number as written.
  std::string text() const;
};
// The words; a fixed scale is written as its number.
constexpr EnumNames<LossScale::Kind, 3> enum_names(LossScale::Kind) {
  return {{{LossScale::Kind::automatic, "auto"}, {LossScale::Kind::dynamic, "dynamic"}, {LossScale::Kind::none, "none"}}};
}

inline std::optional<LossScale> LossScale::parse(const std::string& text) {
  if (const auto kind = parse_enum<Kind>(text)) return LossScale{*kind, 0, {}};
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0) || v > 3.0e38) return std::nullopt;
  return LossScale{Kind::fixed, v, text};
}

inline std::string LossScale::text() const { return kind == Kind::fixed ? written : enum_name(kind); }

// precision.master_weights: fp32 masters beside the 16-bit working copies, or none (bf16 only: the
// bf16 weights are the parameters, updated in fp32 and written back as precision.weight_rounding says).
enum class MasterWeights : unsigned char { fp32, none };
constexpr EnumNames<MasterWeights, 2> enum_names(MasterWeights) {
  return {{{MasterWeights::fp32, "fp32"}, {MasterWeights::none, "none"}}};
}

struct PrecisionConfig {
  PrecisionMode mode = PrecisionMode::fp32;  // compute_type(mode): the type of products and activations
  std::string fp32_layers;          // comma-separated globs over module names kept wholly in fp32
  LossScale loss_scale;             // auto (fp16: dynamic, else none) | dynamic | none | a fixed number
  double init_scale = 65536;        // dynamic: the first scale
  double growth_factor = 2;         // dynamic: scale *= growth after growth_interval clean steps
  double backoff_factor = 0.5;      // dynamic: scale *= backoff after `hysteresis` overflowing steps
  int growth_interval = 2000;
  int hysteresis = 1;
  double min_scale = 1;             // dynamic: an overflow at this scale stops the run
  bool detect_anomaly = false;      // check every layer's output, forward and backward
  // mode fp8: per-tensor delayed scaling (Transformer Engine's DelayedScaling recipe)
  int fp8_history = 1024;           // steps of amax kept per FP8 tensor
  Fp8Amax fp8_amax = Fp8Amax::max;  // max over the history, or the most recent step's
  int fp8_margin = 0;               // scale = (FP8 max / amax) / 2^margin
  std::string fp8_layers = "*";     // comma-separated globs over the linear modules whose products are in FP8
  bool fp8_first_last_bf16 = false; // the first and last transformer blocks' linears in bf16 (Megatron's flag)
  MasterWeights master_weights = MasterWeights::fp32;
  Rounding weight_rounding = Rounding::nearest;  // master_weights none: how an update is written to the bf16 weights
};

}  // namespace avtrain
