#pragma once
// AdamW over the trainable parameters of a ParamStore (fp32 masters, or none: the bf16 weights
// themselves, updated in fp32 and rounded back; fp32 moments); decay only
// where the parameter asks for it (not norms, not biases). Under parallel.zero each replica runs it
// on its own part of the flat buffers.
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "model/param_store.hpp"
#include "optim/optim_config.hpp"

namespace avtrain {

class AdamW {
 public:
  // `part`: the flat elements it updates and keeps moments for (a ZeRO replica's, within the
  // masters `params` holds); default every element.
  // Without masters (params.masterless()) every tensor is updated in place: the fp32 values, and the
  // bf16 weights written back as `rounding` says, the stochastic bits keyed by (seed, name, update,
  // element within the parameter).
  AdamW(Backend& be, ParamStore& params, const OptimConfig& config, std::optional<FlatPart> part = std::nullopt,
        Rounding rounding = Rounding::nearest, std::uint64_t seed = 0);
  // One update of the part's elements from params.grads() times the gate's factor (the unscale and
  // the clip, applied in the same pass), and the new masters to their working copies (what
  // ParamStore::refresh does for the part), or nothing where the gate skips the step. `gate` is in
  // tensor memory (Backend::adamw_tensors): decided there (Backend::update_gate) or uploaded. The
  // update counts for bias correction once took_step() says it was taken. Elementwise: a part's
  // result is the same bits as the whole's.
  void step(float lr, const float* gate);
  void took_step() { ++t_; }
  // Where a gate decided in tensor memory goes (Backend::update_gate), for step(lr, gate()).
  float* gate() { return gate_.data(); }
  // An update decided on the host: step() with the factor as its gate, counted.
  void step(float lr, float grad_factor = 1.0f);
  // The state a checkpoint holds: the moments of the part (laid out as the ParamStore's values,
  // from part().begin) and the number of updates taken (bias correction).
  Buffer& first_moments() { return m_; }
  Buffer& second_moments() { return v_; }
  const FlatPart& part() const { return part_; }
  int updates() const { return t_; }
  void set_updates(int t) { t_ = t; }

 private:
  Backend& be_;
  ParamStore& params_;
  OptimConfig config_;
  FlatPart part_;
  Rounding rounding_;
  std::uint64_t seed_;
  Buffer m_, v_;
  std::vector<Backend::AdamWTensor> tensors_;  // the trainable tensors of the part, made at the first step
  Buffer gate_;  // the update's gate: decided in tensor memory, or uploaded
  int t_ = 0;
};

}  // namespace avtrain
