#include <algorithm>
#include <cmath>

#include "backend/backend.hpp"
#include "model/layer.hpp"

namespace avtrain {

void note_activation(Backend& backend, Flow& flow, const std::string& module, const float* y,
                     std::size_t n) {
  if (!flow.act_stats) return;
  float m = backend.abs_max(y, n);
  float& slot = (*flow.act_stats)[module];
  slot = std::isnan(m) || std::isnan(slot) ? NAN : std::max(slot, m);
}

}  // namespace avtrain
