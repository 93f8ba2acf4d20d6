#include "optim/adamw.hpp"

#include "core/error.hpp"
#include "core/stochastic_round.hpp"

namespace avtrain {

AdamW::AdamW(Backend& be, ParamStore& params, const OptimConfig& config, std::optional<FlatPart> part,
             Rounding rounding, std::uint64_t seed)
    : be_(be), params_(params), config_(config), part_(part.value_or(FlatPart{0, params.total_size()})),
      rounding_(rounding), seed_(seed) {
  const FlatPart held = params.masterless() ? FlatPart{0, params.total_size()} : params.master_part();
  require(held.begin <= part_.begin && part_.begin <= part_.end && part_.end <= held.end,
          "internal: AdamW's part is not among the masters");
  allocating("AdamW's moments of " + std::to_string(part_.size()) + " parameters", 8.0 * double(part_.size()), [&] {
    m_.resize(part_.size());
    v_.resize(part_.size());
  });
  gate_.resize(2);
}

void AdamW::step(float lr, float grad_factor) {
  const float gate[2] = {grad_factor, 0.0f};
  gate_.upload(gate, 2);
  step(lr, gate_.data());
  took_step();
}

void AdamW::step(float lr, const float* gate) {
  // Tensor elements are indexed from part().begin in all four buffers.
  const FlatPart held = params_.master_part();
  if (tensors_.empty()) {
    for (const ParamInfo& p : params_.params()) {
      if (!p.trainable) continue;
      const FlatPart mine = part_.overlap(p.offset, p.offset + p.size);
      if (mine.size() == 0) continue;
      const ParamStore::CopyTarget to = params_.copy_target(p, mine);
      Backend::AdamWTensor t{mine.begin - part_.begin, mine.size(), p.weight_decay ? float(config_.weight_decay) : 0.0f,
                             to.data, to.type};
      if (params_.masterless()) {  // the copy is the weights: updated in place
        t.in_place = true;
        t.rounding = rounding_;
        t.rounding_key = rounding_key(seed_, p.name);
        t.first = mine.begin - p.offset;
      }
      tensors_.push_back(t);
    }
  }
  float* masters = params_.masterless() ? nullptr : params_.masters().data() + (part_.begin - held.begin);
  be_.adamw_tensors(masters, params_.grads().data() + part_.begin,
                    m_.data(), v_.data(), tensors_.data(), int(tensors_.size()), lr, config_.beta1, config_.beta2,
                    config_.eps, gate, t_ + 1);
}

}  // namespace avtrain
