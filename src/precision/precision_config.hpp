#pragma once
// The [precision] section of a deck: compute type, the layers kept in fp32, and loss scaling.
#include <string>

namespace avtrain {

struct PrecisionConfig {
  std::string mode = "fp32";        // fp32 | fp16 | bf16: the compute type of matrix products and activations
  std::string fp32_layers;          // comma-separated globs over module names kept wholly in fp32
  std::string loss_scale = "auto";  // auto (fp16: dynamic, else none) | dynamic | none | a fixed number
  double init_scale = 65536;        // dynamic: the first scale
  double growth_factor = 2;         // dynamic: scale *= growth after growth_interval clean steps
  double backoff_factor = 0.5;      // dynamic: scale *= backoff after `hysteresis` overflowing steps
  int growth_interval = 2000;
  int hysteresis = 1;
  double min_scale = 1;             // dynamic: an overflow at this scale stops the run
  bool detect_anomaly = false;      // check every layer's output, forward and backward
};

}  // namespace avtrain
