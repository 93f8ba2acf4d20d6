#include "data/balanced_weights.hpp"

#include <algorithm>

namespace avtrain::data {

std::vector<double> balanced_weights(const std::vector<std::vector<int>>& sets, int classes) {
  std::vector<double> count(std::size_t(classes), 0.0);
  for (const std::vector<int>& set : sets)
    for (const int c : set) count[std::size_t(c)] += 1;
  std::vector<double> class_weight(count.size());
  for (std::size_t c = 0; c < count.size(); ++c) class_weight[c] = 1000.0 / (count[c] + 0.01);
  std::vector<double> weights(sets.size(), 0.0);
  for (std::size_t k = 0; k < sets.size(); ++k)
    for (const int c : sets[k]) weights[k] += class_weight[std::size_t(c)];
  return weights;
}

std::vector<double> balanced_weights(ShardSet& set, const std::vector<std::int64_t>& samples) {
  constexpr std::size_t kChunk = 4096;  // samples whose labels are read at once
  const int classes = set.info().num_classes;
  std::vector<std::vector<int>> sets;
  sets.reserve(samples.size());
  for (std::size_t begin = 0; begin < samples.size(); begin += kChunk) {
    const std::vector<std::int64_t> chunk(samples.begin() + std::ptrdiff_t(begin),
                                          samples.begin() + std::ptrdiff_t(std::min(samples.size(), begin + kChunk)));
    const MicroBatch labels = set.read(chunk, Fields::labels);
    for (std::size_t r = 0; r < chunk.size(); ++r) {
      std::vector<int>& classes_of = sets.emplace_back();
      if (labels.labels.empty()) {
        classes_of.push_back(labels.label[r]);
        continue;
      }
      for (int c = 0; c < classes; ++c)
        if (labels.labels[r * std::size_t(classes) + std::size_t(c)]) classes_of.push_back(c);
    }
  }
  return balanced_weights(sets, classes);
}

}  // namespace avtrain::data
