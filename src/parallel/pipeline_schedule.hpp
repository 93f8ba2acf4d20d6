#pragma once
// The order in which one pipeline stage runs the forwards and backwards of a step's micro-batches.
//   gpipe: every forward, then every backward, both in micro-batch order 0..m-1.
//   1f1b:  PipeDream-Flush / Megatron non-interleaved: warm-up of min(pp - stage - 1, m) forwards,
//          then steady pairs forward(i + warmup) / backward(i), then the cool-down backwards.
// Both schedules run the backwards in the same order, so gradients accumulate in the same order and
// the two give the same bits. The transfers are implied: a stage that is not first receives its input before each forward and
// sends the input gradient after each backward; one that is not last sends its output after each
// forward and receives the output gradient before each backward.
#include <vector>

#include "core/enum_names.hpp"

namespace avtrain::parallel {

// parallel.schedule
enum class Schedule { gpipe, one_f_one_b };
constexpr EnumNames<Schedule, 2> enum_names(Schedule) {
  return {{{Schedule::gpipe, "gpipe"}, {Schedule::one_f_one_b, "1f1b"}}};
}

struct PipeAction {
  enum Kind { forward, backward } kind;
  int micro_batch;
  bool operator==(const PipeAction&) const = default;
};

// Every micro-batch 0..micro_batches-1 appears once as a forward and once as a backward, the
// forward first.
std::vector<PipeAction> pipeline_actions(Schedule s, int pp, int stage, int micro_batches);

// Most micro-batches whose forward has run and backward has not, at once, on this stage: what
// sets the activation memory (gpipe: m; 1f1b: min(pp - stage, m)).
int max_in_flight(Schedule s, int pp, int stage, int micro_batches);

// Idle share of an ideal pipeline with equal stages and free transfers: (pp - 1) / (m + pp - 1).
double ideal_bubble(int pp, int micro_batches);

}  // namespace avtrain::parallel
