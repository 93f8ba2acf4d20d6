#include "precision/fp8_scaling.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "core/error.hpp"

namespace avtrain {

Fp8DelayedScaling::Fp8DelayedScaling(Fp8Format format, const Fp8Recipe& recipe)
    : format_(format), algorithm_(recipe.amax) {
  require(recipe.history >= 1, "precision.fp8_history = " + std::to_string(recipe.history) + ": must be >= 1");
  require(recipe.margin >= 0 && recipe.margin <= kFp8MarginMax,
          "precision.fp8_margin = " + std::to_string(recipe.margin) + ": must be in [0, " +
              std::to_string(kFp8MarginMax) + "]");
  scaled_max_ = std::ldexp(fp8_max(format), -recipe.margin);
  ring_.assign(std::size_t(recipe.history), 0.0f);
}

void Fp8DelayedScaling::record(float amax) {
  if (std::isnan(amax) || amax > step_amax_) step_amax_ = amax;  // a NaN, once in, stays
}

// The largest amax in the window; NaN if one is NaN.
float Fp8DelayedScaling::window_amax() const {
  float largest = 0.0f;
  for (const float a : ring_) {
    if (std::isnan(a)) return a;
    if (a > largest) largest = a;
  }
  return largest;
}

float Fp8DelayedScaling::scale_for(float amax) const {
  if (!(std::isfinite(amax) && amax > 0.0f)) return scale_;  // no scale can be taken from it: keep the old one
  const float scale = scaled_max_ / amax;
  return std::isinf(scale) ? std::numeric_limits<float>::max() : scale;
}

bool Fp8DelayedScaling::has_history() const {
  for (const float a : ring_)
    if (a != 0.0f) return true;  // NaN too
  return false;
}

void Fp8DelayedScaling::update() {
  const float last = step_amax_;
  step_amax_ = 0.0f;
  if (last == 0.0f) return;  // nothing seen: the history and the scale stay (TE's bulk update)
  ring_[next_] = last;
  next_ = (next_ + 1) % ring_.size();
  scale_ = scale_for(algorithm_ == Fp8Amax::most_recent ? last : window_amax());
}

std::vector<float> Fp8DelayedScaling::history() const {
  std::vector<float> oldest_first(ring_.size());
  for (std::size_t i = 0; i < ring_.size(); ++i) oldest_first[i] = ring_[(next_ + i) % ring_.size()];
  return oldest_first;
}

std::vector<float> Fp8DelayedScaling::state() const {
  std::vector<float> s{scale_, step_amax_};
  const std::vector<float> h = history();
  s.insert(s.end(), h.begin(), h.end());
  return s;
}

void Fp8DelayedScaling::restore(const std::vector<float>& state) {
  if (state.size() != state_size())
    throw Error("FP8 scaling state of " + std::to_string(state.size() < 2 ? 0 : state.size() - 2) +
                " amaxes, but precision.fp8_history is " + std::to_string(ring_.size()) +
                " (a checkpoint continues with the history it was written with)");
  scale_ = state[0];
  step_amax_ = state[1];
  ring_.assign(state.begin() + 2, state.end());
  next_ = 0;
}

}  // namespace avtrain
