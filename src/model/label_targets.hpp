#pragma once
// The targets of the multi-label loss and of validation's scores: row r's set of classes as 0/1 (the
// micro-batch's v2 label sets, or its one label), and under mixup (Zhang et al. 2018; AST mixes the
// labels the same way) lambda times the row's own set plus 1 - lambda times its partner's.
#include <cstdint>
#include <vector>

#include "data/shard_set.hpp"

namespace avtrain {

// 1 for each class of row r's set: [rows, classes].
std::vector<std::uint8_t> label_sets(const data::MicroBatch& batch, int classes);

// The binary cross-entropy's targets [rows, classes] in [0, 1]: the sets, mixed where the batch was
// (mix_label set: mixed = true).
std::vector<float> mixed_targets(const data::MicroBatch& batch, int classes, bool mixed);

}  // namespace avtrain
