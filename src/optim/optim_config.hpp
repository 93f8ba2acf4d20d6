#pragma once

namespace avtrain {

struct OptimConfig {
  double lr = 2e-3;           // peak learning rate
  double min_lr = 2e-4;       // end of the cosine
  int warmup_steps = 50;     // linear warm-up: step s < warmup uses lr * (s + 1) / warmup
  double weight_decay = 0.05;  // not applied to norms and biases
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip_norm = 1.0;     // global-norm clipping; 0 turns it off
};

}  // namespace avtrain
