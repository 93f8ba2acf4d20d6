#include "model/fp8_linears.hpp"

#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace avtrain {

namespace {
constexpr double kInfCode = 1e300, kNaNCode = 2e300;  // above every finite fp32 amax
using Role = Fp8LinearScaling::Role;
}  // namespace

Fp8Linears::Fp8Linears(const std::vector<Linear*>& linears, const std::function<bool(const std::string&)>& selected,
                       const Fp8Recipe& recipe) {
  for (Linear* l : linears) {
    if (!selected(l->module())) continue;
    scalings_.push_back(std::make_unique<Fp8LinearScaling>(l->module(), recipe));
    l->use_fp8(scalings_.back().get());
  }
}

std::vector<std::string> Fp8Linears::modules() const {
  std::vector<std::string> names;
  for (const auto& s : scalings_) names.push_back(s->module());
  return names;
}

void Fp8Linears::begin_step() {
  for (auto& s : scalings_) s->begin_step();
}

double Fp8Linears::encode_amax(float amax) {
  if (std::isnan(amax)) return kNaNCode;
  if (std::isinf(amax)) return kInfCode;
  return double(amax);
}

float Fp8Linears::decode_amax(double code) {
  if (code >= kNaNCode) return std::numeric_limits<float>::quiet_NaN();
  if (code >= kInfCode) return std::numeric_limits<float>::infinity();
  return float(code);  // exact: a finite fp32 value
}

void Fp8Linears::end_step(const Reduce& reduce_max, const Reduce& reduce_sum) {
  if (scalings_.empty()) return;
  constexpr double kNone = -std::numeric_limits<double>::infinity();  // no non-zero value: below any -min
  std::vector<double> largest, sums;  // per module and tensor: amax, -min_nonzero; underflow, saturated, values
  for (auto& s : scalings_) {
    s->end_step();
    for (int r = 0; r < Fp8LinearScaling::kRoles; ++r) {
      const Fp8LinearScaling::StepCasts& c = s->step(Role(r));
      largest.push_back(encode_amax(s->scaling(Role(r)).step_amax()));
      largest.push_back(c.cast.min_nonzero != 0.0f ? -double(c.cast.min_nonzero) : kNone);
      sums.insert(sums.end(), {c.cast.underflow, c.cast.saturated, c.values});
    }
  }
  reduce_max(largest.data(), largest.size());
  reduce_sum(sums.data(), sums.size());
  std::size_t i = 0, j = 0;
  for (auto& s : scalings_) {
    for (int r = 0; r < Fp8LinearScaling::kRoles; ++r) {
      const float amax = decode_amax(largest[i++]);
      const double min_code = largest[i++];
      s->scaling(Role(r)).set_step_amax(amax);
      Fp8LinearScaling::StepCasts& c = s->step(Role(r));
      c.cast.amax = amax;
      c.scale = s->cast_scale(Role(r), amax);  // the replicas' largest amax: every replica's same scale
      c.cast.min_nonzero = min_code == kNone ? 0.0f : float(-min_code);  // exact: a finite fp32 value
      c.cast.underflow = sums[j++];
      c.cast.saturated = sums[j++];
      c.values = sums[j++];
    }
    s->update();
  }
}

bool Fp8Linears::freeze(const std::string& module) {
  for (auto& s : scalings_)
    if (s->module() == module) {
      s->freeze();
      return true;
    }
  return false;
}

std::size_t Fp8Linears::state_size() const {
  if (scalings_.empty()) return 0;
  std::size_t n = 0;
  for (int r = 0; r < Fp8LinearScaling::kRoles; ++r) n += scalings_.front()->scaling(Role(r)).state_size();
  return n;
}

std::vector<float> Fp8Linears::state(std::size_t i) const {
  std::vector<float> flat;
  for (int r = 0; r < Fp8LinearScaling::kRoles; ++r) {
    const std::vector<float> one = scalings_[i]->scaling(Role(r)).state();
    flat.insert(flat.end(), one.begin(), one.end());
  }
  return flat;
}

void Fp8Linears::restore(std::size_t i, const std::vector<float>& state) {
  Fp8LinearScaling& s = *scalings_[i];
  require(state.size() == state_size(), "checkpoint: the FP8 scaling state of " + s.module() + " has " +
                                            std::to_string(state.size()) + " values, this run's " +
                                            std::to_string(state_size()) + " (another precision.fp8_history?)");
  std::size_t at = 0;
  for (int r = 0; r < Fp8LinearScaling::kRoles; ++r) {
    Fp8DelayedScaling& scaling = s.scaling(Role(r));
    scaling.restore(std::vector<float>(state.begin() + std::ptrdiff_t(at),
                                       state.begin() + std::ptrdiff_t(at + scaling.state_size())));
    at += scaling.state_size();
  }
  s.load_scales();
}

}  // namespace avtrain
