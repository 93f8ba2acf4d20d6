#include "optim/adamw.hpp"

#include "core/error.hpp"

namespace avtrain {

AdamW::AdamW(Backend& be, ParamStore& params, const OptimConfig& config)
    : be_(be), params_(params), config_(config) {
  allocating("AdamW's moments of " + std::to_string(params.total_size()) + " parameters", 8.0 * double(params.total_size()),
             [&] {
               m_.resize(params.total_size());
               v_.resize(params.total_size());
             });
}

void AdamW::step(float lr) {
  ++t_;
  for (ParamId id = 0; id < ParamId(params_.params().size()); ++id) {
    const ParamInfo& p = params_.info(id);
    if (!p.trainable) continue;
    be_.adamw(params_.value(id), params_.grad(id), m_.data() + p.offset, v_.data() + p.offset, p.size, lr,
              config_.beta1, config_.beta2, config_.eps, p.weight_decay ? config_.weight_decay : 0.0f, t_);
  }
}

}  // namespace avtrain
