#include "precision/loss_scaler.hpp"

#include <algorithm>
#include <sstream>

#include "core/error.hpp"

namespace avtrain {

LossScaler::LossScaler(const PrecisionConfig& c, DType compute)
    : scale_(1), growth_(c.growth_factor), backoff_(c.backoff_factor), min_scale_(c.min_scale),
      interval_(c.growth_interval), hysteresis_(c.hysteresis), hysteresis_tracker_(c.hysteresis) {
  switch (c.loss_scale.kind) {
    case LossScale::Kind::automatic: kind_ = compute == DType::f16 ? Kind::dynamic : Kind::none; break;
    case LossScale::Kind::dynamic: kind_ = Kind::dynamic; break;
    case LossScale::Kind::none: kind_ = Kind::none; break;
    case LossScale::Kind::fixed:
      kind_ = Kind::fixed;
      scale_ = c.loss_scale.fixed;
      break;
  }
  if (kind_ == Kind::dynamic) {
    scale_ = c.init_scale;
    if (!(c.min_scale <= c.init_scale))
      throw Error("precision.min_scale (" + std::to_string(c.min_scale) + ") is above precision.init_scale (" +
                  std::to_string(c.init_scale) + ")");
  }
}

bool LossScaler::update(bool found_inf, std::int64_t step) {
  if (!found_inf) {
    if (kind_ == Kind::dynamic && ++growth_tracker_ == interval_) {
      growth_tracker_ = 0;
      hysteresis_tracker_ = hysteresis_;
      scale_ = std::min(scale_ * growth_, 3.0e38);
    }
    return true;
  }
  ++skipped_;
  if (kind_ == Kind::dynamic) {
    growth_tracker_ = 0;
    if (--hysteresis_tracker_ <= 0) {
      if (scale_ <= min_scale_) {
        std::ostringstream m;
        m << "step " << step << ": gradients overflow at the minimum loss scale " << scale_
          << " (precision.min_scale); the model diverges in fp16 — try bf16, precision.fp32_layers or a lower lr";
        throw Error(m.str());
      }
      scale_ = std::max(scale_ * backoff_, min_scale_);
    }
  }
  return false;
}

std::string LossScaler::describe() const {
  std::ostringstream s;
  switch (kind_) {
    case Kind::none: s << "none"; break;
    case Kind::fixed: s << "fixed " << scale_; break;
    case Kind::dynamic:
      s << "dynamic (init " << scale_ << ", growth " << growth_ << " every " << interval_ << " steps, backoff "
        << backoff_ << " after " << hysteresis_ << " overflow(s), min " << min_scale_ << ")";
      break;
  }
  return s.str();
}

}  // namespace avtrain
