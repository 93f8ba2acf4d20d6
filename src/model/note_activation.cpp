#include <algorithm>
#include <cmath>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "model/layer.hpp"

namespace avtrain {

namespace {
[[noreturn]] void anomaly(const Flow& flow, const std::string& module, const char* direction, float absmax) {
  throw Error("step " + std::to_string(flow.step) + ": " + (std::isnan(absmax) ? "NaN" : "inf") + " in the " +
              direction + " of " + module + " (detect-anomaly)");
}
}  // namespace

void note_activation(Backend& backend, Flow& flow, const std::string& module, const float* y,
                     std::size_t n) {
  note_activation(backend, flow, module, fp32(y), n);
}

void note_activation(Backend& backend, Flow& flow, const std::string& module, Operand y, std::size_t n) {
  if (flow.detect_anomaly) {  // the one check that must stop the host at once
    const float m = backend.abs_max(y, n);
    if (!std::isfinite(m)) anomaly(flow, module, "forward output", m);
  }
  if (flow.act_stats) flow.act_stats->note(backend, module, y, n);
}

void note_gradient(Backend& backend, const Flow& flow, const std::string& module, const float* dx,
                   std::size_t n) {
  note_gradient(backend, flow, module, fp32(dx), n);
}

void note_gradient(Backend& backend, const Flow& flow, const std::string& module, Operand dx, std::size_t n) {
  if (!flow.detect_anomaly) return;
  const float m = backend.abs_max(dx, n);
  if (!std::isfinite(m)) anomaly(flow, module, "backward (its input gradient)", m);
}

}  // namespace avtrain
