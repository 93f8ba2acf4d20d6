#pragma once
// The [precision] section of a deck: compute type, the layers kept in fp32, and loss scaling.
#include <cstdlib>
#include <optional>
#include <string>

#include "core/dtype.hpp"
#include "core/enum_names.hpp"
#include "core/stochastic_round.hpp"

namespace avtrain {

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
  DType mode = DType::f32;          // the compute type of matrix products and activations
  std::string fp32_layers;          // comma-separated globs over module names kept wholly in fp32
  LossScale loss_scale;             // auto (fp16: dynamic, else none) | dynamic | none | a fixed number
  double init_scale = 65536;        // dynamic: the first scale
  double growth_factor = 2;         // dynamic: scale *= growth after growth_interval clean steps
  double backoff_factor = 0.5;      // dynamic: scale *= backoff after `hysteresis` overflowing steps
  int growth_interval = 2000;
  int hysteresis = 1;
  double min_scale = 1;             // dynamic: an overflow at this scale stops the run
  bool detect_anomaly = false;      // check every layer's output, forward and backward
  MasterWeights master_weights = MasterWeights::fp32;
  Rounding weight_rounding = Rounding::nearest;  // master_weights none: how an update is written to the bf16 weights
};

}  // namespace avtrain
