#pragma once

namespace avtrain {

struct OptimConfig {
  float lr = 2e-3f;          // peak learning rate
  float min_lr = 2e-4f;      // end of the cosine
  int warmup_steps = 50;     // linear warm-up from 0
  float weight_decay = 0.05f;  // not applied to norms and biases
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float clip_norm = 1.0f;    // global-norm clipping; 0 turns it off
};

}  // namespace avtrain
