#pragma once
// What a transformer block keeps from forward for its backward (train.recompute): activation memory
// traded for compute, never for a different result.
//   none       everything backward reads, the attention probabilities [B, H, L, L] included
//   attention  all but the probabilities: backward recomputes them per (sample, head) from q, k and
//              each row's softmax statistics (selective recomputation, flash attention's way)
//   blocks     only the block's input [B, L, D]: backward runs the block's forward again (its
//              probabilities as in `attention`), then its backward (Megatron's full recomputation)
// The recomputation repeats forward's operations in forward's order, so every setting gives the same
// bits.
#include "core/enum_names.hpp"

namespace avtrain {

enum class Recompute { none, attention, blocks };
constexpr EnumNames<Recompute, 3> enum_names(Recompute) {
  return {{{Recompute::none, "none"}, {Recompute::attention, "attention"}, {Recompute::blocks, "blocks"}}};
}

}  // namespace avtrain
