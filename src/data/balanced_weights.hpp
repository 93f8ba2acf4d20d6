#pragma once
// data.sampling balanced: AST's class-balanced sampler (YuanGongND/ast, gen_weight_file.py, used with
// torch's WeightedRandomSampler, replacement on). Over the training samples, class c's weight is
// 1000 / (n_c + 0.01), n_c the training samples whose set holds c; a sample's weight is the sum of
// its classes' weights (one class for a single-label set). Sampler::draw_by_weight then draws each
// epoch's samples with replacement in proportion to these weights.
#include <cstdint>
#include <vector>

#include "data/shard_set.hpp"

namespace avtrain::data {

// One weight per sample of `samples` (global indices into `set`), reading their labels alone.
std::vector<double> balanced_weights(ShardSet& set, const std::vector<std::int64_t>& samples);

// The same from the samples' sets of classes: sets[k] holds sample k's classes.
std::vector<double> balanced_weights(const std::vector<std::vector<int>>& sets, int classes);

}  // namespace avtrain::data
