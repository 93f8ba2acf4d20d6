#pragma once
// OUT/eval_scores.h5, written by --eval-only beside eval.json: every validation sample's logits and
// set of classes in sample order, so that other tools (sklearn, a team's own analysis) can recompute
// or extend the metrics. Datasets: /index int64 [N] (the sample's index in eval.json's val_set),
// /logits float32 [N, classes], /targets uint8 [N, classes] (1 for each of the sample's classes);
// attribute class_names where the set has them. Written to a temporary name and renamed.
#include <cstdint>
#include <string>
#include <vector>

namespace avtrain {

void write_eval_scores(const std::string& path, const std::vector<std::int64_t>& index, const std::vector<float>& logits,
                       const std::vector<std::uint8_t>& targets, int classes,
                       const std::vector<std::string>& class_names);

}  // namespace avtrain
