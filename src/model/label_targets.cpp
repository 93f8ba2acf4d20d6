#include "model/label_targets.hpp"

#include <algorithm>

namespace avtrain {

namespace {
std::vector<std::uint8_t> sets_of(const std::vector<std::uint8_t>& sets, const std::vector<std::int32_t>& label,
                                  int classes) {
  if (!sets.empty()) return sets;
  std::vector<std::uint8_t> out(label.size() * std::size_t(classes), 0);
  for (std::size_t r = 0; r < label.size(); ++r) out[r * std::size_t(classes) + std::size_t(label[r])] = 1;
  return out;
}
}  // namespace

std::vector<std::uint8_t> label_sets(const data::MicroBatch& batch, int classes) {
  return sets_of(batch.labels, batch.label, classes);
}

std::vector<float> mixed_targets(const data::MicroBatch& batch, int classes, bool mixed) {
  const std::vector<std::uint8_t> own = label_sets(batch, classes);
  std::vector<float> targets(own.begin(), own.end());
  if (!mixed) return targets;
  const std::vector<std::uint8_t> partner = sets_of(batch.mix_labels, batch.mix_label, classes);
  const float lambda = batch.mix_weight;
  for (std::size_t i = 0; i < targets.size(); ++i)
    targets[i] = lambda * float(own[i]) + (1.0f - lambda) * float(partner[i]);
  return targets;
}

}  // namespace avtrain
