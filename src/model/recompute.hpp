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
#include <string>

#include "core/error.hpp"

namespace avtrain {

enum class Recompute { none, attention, blocks };

inline Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "attention") return Recompute::attention;
  if (name == "blocks") return Recompute::blocks;
  throw Error("train.recompute = " + name + ": must be one of none, attention, blocks");
}

inline const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::attention ? "attention" : "blocks";
}

}  // namespace avtrain
