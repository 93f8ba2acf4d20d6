#include "parallel/pipeline_schedule.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace avtrain::parallel {
namespace {

void check_shape(int pp, int stage, int micro_batches) {
  require(pp >= 1 && stage >= 0 && stage < pp,
          "internal: pipeline stage " + std::to_string(stage) + " of parallel.pp = " + std::to_string(pp));
  require(micro_batches >= 1, "train.micro_batches = " + std::to_string(micro_batches) + ": must be >= 1");
}

// Forwards a 1F1B stage runs before its first backward: enough to fill the stages after it.
int warmup(int pp, int stage, int micro_batches) { return std::min(pp - stage - 1, micro_batches); }

}  // namespace

std::vector<PipeAction> pipeline_actions(Schedule s, int pp, int stage, int micro_batches) {
  check_shape(pp, stage, micro_batches);
  const int m = micro_batches;
  std::vector<PipeAction> actions;
  actions.reserve(2 * std::size_t(m));
  const int warm = s == Schedule::gpipe ? m : warmup(pp, stage, m);
  for (int i = 0; i < warm; ++i) actions.push_back({PipeAction::forward, i});
  for (int i = 0; i < m - warm; ++i) {
    actions.push_back({PipeAction::forward, i + warm});
    actions.push_back({PipeAction::backward, i});
  }
  for (int i = m - warm; i < m; ++i) actions.push_back({PipeAction::backward, i});
  return actions;
}

int max_in_flight(Schedule s, int pp, int stage, int micro_batches) {
  check_shape(pp, stage, micro_batches);
  return s == Schedule::gpipe ? micro_batches : std::min(pp - stage, micro_batches);
}

double ideal_bubble(int pp, int micro_batches) {
  require(pp >= 1 && micro_batches >= 1, "internal: ideal_bubble needs pp >= 1 and micro_batches >= 1");
  return double(pp - 1) / double(micro_batches + pp - 1);
}

}  // namespace avtrain::parallel
