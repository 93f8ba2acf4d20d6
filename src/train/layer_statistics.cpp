#include "train/layer_statistics.hpp"

#include <cmath>
#include <map>

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
    if (modules_.empty() || modules_.back().name != p.module) modules_.push_back({p.module, {}});
    modules_.back().params.push_back(id);
  }
}

std::vector<LayerRow> LayerStatistics::rows(DistributedOptimizer& optimizer, const ActivationStats& acts,
                                            DType compute, double loss_scale, double& grad_sum_squares) const {
  std::vector<LayerRow> rows;
  grad_sum_squares = 0;
  const double unscale2 = 1.0 / (loss_scale * loss_scale);
  const DistributedOptimizer::Statistics stats = optimizer.statistics(underflow_threshold(compute));
  const std::map<std::string, float> absmax = acts.read();
  const ParamStore& params = optimizer.params();
  for (const Module& m : modules_) {
    LayerRow r;
    r.layer = m.name;
    double gsq = 0, psq = 0;
    std::size_t underflow = 0, size = 0;
    for (ParamId id : m.params) {
      const ParamInfo& p = params.info(id);
      const Backend::TensorStats& s = stats.grads[std::size_t(id)];
      gsq += s.sum_squares * unscale2;
      underflow += (p.size - s.nonzero) + s.below;  // zeros included: a flushed value is the extreme case
      size += p.size;
      r.nonfinite += s.nonfinite;
      psq += stats.values[std::size_t(id)].sum_squares;
    }
    grad_sum_squares += gsq;
    r.grad_norm = std::sqrt(gsq);
    r.param_norm = std::sqrt(psq);
    r.grad_underflow_frac = size ? double(underflow) / double(size) : 0.0;
    if (auto it = absmax.find(m.name); it != absmax.end()) r.act_absmax = it->second;
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace avtrain
