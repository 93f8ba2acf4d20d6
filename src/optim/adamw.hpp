#pragma once
// AdamW over the trainable parameters of a ParamStore (fp32 masters, fp32 moments); decay only
// where the parameter asks for it (not norms, not biases).
#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "model/param_store.hpp"
#include "optim/optim_config.hpp"

namespace avtrain {

class AdamW {
 public:
  AdamW(Backend& be, ParamStore& params, const OptimConfig& config);
  void step(float lr);  // one update from params.grads()
  // The state a checkpoint holds: the moments (laid out as the ParamStore's values) and the
  // number of updates taken (bias correction).
  Buffer& first_moments() { return m_; }
  Buffer& second_moments() { return v_; }
  int updates() const { return t_; }
  void set_updates(int t) { t_ = t; }

 private:
  Backend& be_;
  ParamStore& params_;
  OptimConfig config_;
  Buffer m_, v_;
  int t_ = 0;
};

}  // namespace avtrain
