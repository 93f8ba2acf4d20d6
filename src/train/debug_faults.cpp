#include "train/debug_faults.hpp"

#include <limits>
#include <string>

#include "core/error.hpp"

namespace avtrain {

namespace {
// "RANK:STEP" of a debug option; {-1, -1} when empty.
std::pair<int, std::int64_t> parse_rank_step(const std::string& text, const char* option) {
  if (text.empty()) return {-1, -1};
  const auto colon = text.find(':');
  try {
    if (colon != std::string::npos) return {std::stoi(text.substr(0, colon)), std::stoll(text.substr(colon + 1))};
  } catch (const std::exception&) {
  }
  throw Error(std::string("option ") + option + " = '" + text + "': expected RANK:STEP, e.g. 1:3");
}
}  // namespace

DebugFaults::DebugFaults(const DebugConfig& debug, int rank)
    : debug_(debug),
      rank_(rank),
      inject_overflow_(parse_rank_step(debug.inject_overflow, "debug.inject_overflow")),
      perturb_weights_(parse_rank_step(debug.perturb_weights, "debug.perturb_weights")) {}

std::int64_t DebugFaults::stall_reader_at() const {
  const auto stall = parse_rank_step(debug_.stall_reader, "debug.stall_reader");
  return stall.first == rank_ ? stall.second : -1;
}

void DebugFaults::overflow(Backend& be, ParamStore& params) {
  const float inf = std::numeric_limits<float>::infinity();
  be.upload(params.grads().data(), &inf, sizeof inf);
}

void DebugFaults::perturb_if_due(Backend& be, ParamStore& params, std::int64_t step) const {
  if (perturb_weights_.first != rank_ || perturb_weights_.second != step) return;
  float first = 0;
  be.download(&first, params.values().data(), sizeof first);
  first += 1e-3f;
  be.upload(params.values().data(), &first, sizeof first);
}

}  // namespace avtrain
