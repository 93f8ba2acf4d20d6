#include "optim/adamw.hpp"

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
    const FlatPart mine = part_.overlap(p.offset, p.offset + p.size);
    if (mine.size() == 0) continue;
    const std::size_t at = mine.begin - part_.begin;
    be_.adamw(params_.masters().data() + (mine.begin - params_.master_part().begin), params_.grads().data() + mine.begin,
              m_.data() + at, v_.data() + at, mine.size(), lr, config_.beta1, config_.beta2, config_.eps,
              p.weight_decay ? config_.weight_decay : 0.0f, t_);
  }
}

}  // namespace avtrain
