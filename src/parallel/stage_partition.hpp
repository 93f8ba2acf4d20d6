#pragma once
// Cutting AVNet's ordered layer list (input, blocks.0 .. blocks.N-1, head) into pp contiguous
// pipeline stages, each of at least one layer.
#include <cstddef>
#include <string>
#include <vector>

namespace avtrain::parallel {

struct LayerCost {
  std::string name;               // "input", "blocks.3", "head"
  std::size_t params = 0;         // trainable parameters
  double flops = 0;               // forward FLOPs of one micro-batch
  std::size_t activation_bytes = 0;  // kept for backward, one micro-batch
};

struct StageRange {
  int first = 0, last = 0;  // layers [first, last)
};

// spec:
//   "params"  (default) contiguous cut that minimises the largest stage's parameter count, exactly
//             (ties: the lexicographically earliest cut points, i.e. stage 0 as short as the optimum
//             allows, then stage 1, ...)
//   "uniform" layers split as evenly as possible by count (the first stages take the remainder)
//   a comma-separated list of pp-1 layer names (or indices), each the first layer of the next
//             stage: "blocks.2" for pp = 2, "blocks.1,blocks.3" or "2,4" for pp = 3; spaces around
//             entries are ignored, and "" is the list for pp = 1
// Throws Error naming parallel.partition when pp exceeds the layer count or a list is malformed,
// names an unknown layer, is not increasing, or leaves a stage empty.
std::vector<StageRange> partition_stages(const std::vector<LayerCost>& layers, int pp, const std::string& spec);

}  // namespace avtrain::parallel
