#include "optim/adamw.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace avtrain {

AdamW::AdamW(Backend& be, ParamStore& params, const OptimConfig& config, std::optional<FlatPart> part)
    : be_(be), params_(params), config_(config), part_(part.value_or(FlatPart{0, params.total_size()})) {
  const FlatPart held = params.master_part();
  require(held.begin <= part_.begin && part_.begin <= part_.end && part_.end <= held.end,
          "internal: AdamW's part is not among the masters");
  allocating("AdamW's moments of " + std::to_string(part_.size()) + " parameters", 8.0 * double(part_.size()), [&] {
    m_.resize(part_.size());
    v_.resize(part_.size());
  });
}

void AdamW::step(float lr) {
  ++t_;
  for (ParamId id = 0; id < ParamId(params_.params().size()); ++id) {
    const ParamInfo& p = params_.info(id);
    if (!p.trainable) continue;
    const std::size_t lo = std::max(p.offset, part_.begin), hi = std::min(p.offset + p.size, part_.end);
    if (lo >= hi) continue;
    be_.adamw(params_.masters().data() + (lo - params_.master_part().begin), params_.grads().data() + lo,
              m_.data() + (lo - part_.begin),
              v_.data() + (lo - part_.begin), hi - lo, lr, config_.beta1, config_.beta2, config_.eps,
              p.weight_decay ? config_.weight_decay : 0.0f, t_);
  }
}

}  // namespace avtrain
