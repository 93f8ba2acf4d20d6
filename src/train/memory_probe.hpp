#pragma once
// What a micro-batch takes, measured: forwards of all-valid micro-batches at the input's full length
// on the backend given (the CPU backend in --dry-run), and the bytes each layer then keeps for
// backward.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/shard_set.hpp"
#include "model/model_config.hpp"
#include "model/recompute.hpp"
#include "precision/precision_config.hpp"

namespace avtrain {

// One micro-batch of B samples: the bytes each layer of the whole net keeps for backward, and the
// workspace.
struct MicroBatchMemory {
  std::vector<std::size_t> layers;
  std::size_t workspace = 0;
  std::size_t kept() const;  // the layers' bytes together
};

// Every saved tensor and workspace slot is affine in the batch (per-sample tensors plus per-channel
// statistics), so probes of 1 and 2 samples give it for any B exactly, without a forward of B
// samples: a deck sized for a large GPU would not fit a login node's memory.
struct MicroBatchMemoryModel {
  MicroBatchMemory one, two;  // measured at B = 1 and B = 2
  MicroBatchMemory at(int B) const;
};

// Measures the net of `model` on `input` in the types `precision` gives (its FP8 linears in FP8,
// keeping their inputs' E4M3 copies) with `recompute`, on the CPU backend with attention's arithmetic
// left out (sizes do not depend on values). Where every block computes in the same types, a net of
// one block is measured and each block keeps what it keeps (the blocks are alike): a probe of a deep
// net at a long clip costs one block's forward, not depth's. `parts` (parallel.cp): what one rank of a
// sample's parts keeps (its share of the tokens; attention over them all for its share of the heads).
MicroBatchMemoryModel measure_micro_batches(const ModelConfig& model, const data::SetInfo& input,
                                            const PrecisionConfig& precision, Recompute recompute, std::uint64_t seed,
                                            int parts = 1);

}  // namespace avtrain
