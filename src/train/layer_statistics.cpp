#include "train/layer_statistics.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "backend/update_gate.hpp"
#include "core/error.hpp"

namespace avtrain {

namespace {
// Below this |g| a gradient value is not held at full precision by the compute type: its smallest
// normal. An fp32 run reports against fp16's, what an fp16 run of it would lose.
float underflow_threshold(DType compute) { return compute == DType::bf16 ? 0x1p-126f : 0x1p-14f; }
}  // namespace

LayerStatistics::LayerStatistics(const ParamStore& params) {
  for (ParamId id = 0; id < ParamId(params.params().size()); ++id) {
    const ParamInfo& p = params.info(id);
    if (!p.trainable) continue;
    if (names_.empty() || names_.back() != p.module) {
      names_.push_back(p.module);
      first_.push_back(int(params_.size()));
    }
    params_.push_back(int(id));
  }
  first_.push_back(int(params_.size()));
}

void LayerStatistics::start(DistributedOptimizer& optimizer, DType compute) const {
  optimizer.start_statistics(underflow_threshold(compute));
}

Backend::UpdateRule LayerStatistics::update_rule(double loss_scale, float max_norm, bool loss_finite) {
  if (device_params_.size() != params_.size()) {
    device_params_.upload(params_.data(), params_.size());
    device_first_.upload(first_.data(), first_.size());
  }
  Backend::UpdateRule rule;
  rule.params = device_params_.data();
  rule.module_first = device_first_.data();
  rule.modules = int(names_.size());
  rule.loss_scale = loss_scale;
  rule.max_norm = max_norm;
  rule.loss_nonfinite = !loss_finite;
  return rule;
}

std::vector<LayerRow> LayerStatistics::rows(DistributedOptimizer& optimizer, const ActivationStats& acts,
                                            double loss_scale, double& grad_sum_squares) const {
  std::vector<LayerRow> rows;
  grad_sum_squares = 0;
  const double unscale2 = unscale_squared(loss_scale);
  const DistributedOptimizer::Statistics stats = optimizer.statistics();
  const std::map<std::string, float> absmax = acts.read();
  const ParamStore& params = optimizer.params();
  for (std::size_t m = 0; m < names_.size(); ++m) {
    LayerRow r;
    r.layer = names_[m];
    // The norm as the update's gate takes it (backend/update_gate.hpp).
    const double gsq = unscaled_sum_squares(stats.grads.data(), params_.data(), first_[m], first_[m + 1], unscale2);
    double psq = 0;
    std::size_t underflow = 0, size = 0;
    for (int i = first_[m]; i < first_[m + 1]; ++i) {
      const ParamInfo& p = params.info(ParamId(params_[i]));
      const Backend::TensorStats& s = stats.grads[std::size_t(params_[i])];
      underflow += (p.size - s.nonzero) + s.below;  // zeros included: a flushed value is the extreme case
      size += p.size;
      r.nonfinite += s.nonfinite;
      psq += stats.values[std::size_t(params_[i])].sum_squares;
    }
    grad_sum_squares += gsq;
    r.grad_norm = std::sqrt(gsq);
    r.param_norm = std::sqrt(psq);
    r.grad_underflow_frac = size ? double(underflow) / double(size) : 0.0;
    if (auto it = absmax.find(r.layer); it != absmax.end()) r.act_absmax = it->second;
    rows.push_back(std::move(r));
  }
  return rows;
}

void LayerStatistics::add_fp8(std::vector<LayerRow>& rows, const Fp8Linears& fp8) {
  for (const auto& s : fp8.scalings()) {
    const auto row = std::find_if(rows.begin(), rows.end(), [&](const LayerRow& r) { return r.layer == s->module(); });
    require(row != rows.end(), "internal: FP8 linear " + s->module() + " has no row in layers.csv");
    for (int t = 0; t < Fp8LinearScaling::kRoles; ++t) {
      const Fp8LinearScaling::StepCasts& c = s->step(Fp8LinearScaling::Role(t));
      std::optional<double>* col = row->fp8.data() + std::size_t(t) * kFp8LayerColumnsPerTensor;
      col[0] = c.cast.amax;
      col[1] = c.scale;
      if (c.values > 0) {
        col[2] = c.cast.underflow / c.values;
        col[3] = c.cast.saturated / c.values;
      }
      if (c.cast.min_nonzero > 0.0f)
        col[4] = std::log2(double(c.cast.amax)) - std::log2(double(c.cast.min_nonzero));
    }
  }
}

}  // namespace avtrain
