#include "parallel/stage_partition.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <optional>
#include <utility>

#include "core/error.hpp"

namespace avtrain::parallel {
namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// "blocks.3" -> ("blocks", 3); names without a numeric suffix -> nothing.
std::optional<std::pair<std::string, long>> numbered(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || !all_digits(name.substr(dot + 1))) return std::nullopt;
  long index = 0;
  const auto [end, ec] = std::from_chars(name.data() + dot + 1, name.data() + name.size(), index);
  if (ec != std::errc() || end != name.data() + name.size()) return std::nullopt;
  return std::pair{name.substr(0, dot), index};
}

// "input, blocks.0..3, head": consecutive stem.k runs are folded so a deep model stays one line.
std::string layer_summary(const std::vector<LayerCost>& layers) {
  std::string out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i + 1;
    const auto head = numbered(layers[i].name);
    if (head) {
      while (j < layers.size()) {
        const auto next = numbered(layers[j].name);
        if (!next || next->first != head->first || next->second != head->second + long(j - i)) break;
        ++j;
      }
    }
    if (!out.empty()) out += ", ";
    out += layers[i].name;
    if (j - i > 1) out += ".." + std::to_string(head->second + long(j - i - 1));
    i = j;
  }
  return out;
}

std::vector<StageRange> from_cuts(const std::vector<int>& cuts, int layer_count) {
  std::vector<StageRange> stages;
  int first = 0;
  for (const int cut : cuts) {
    stages.push_back({first, cut});
    first = cut;
  }
  stages.push_back({first, layer_count});
  return stages;
}

std::vector<StageRange> by_params(const std::vector<LayerCost>& layers, int pp) {
  const int n = int(layers.size());
  std::vector<std::size_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layers[i].params;
  const auto sum = [&](int a, int b) { return prefix[b] - prefix[a]; };

  // best[k][i]: the smallest possible largest stage when layers [i, n) form k non-empty stages.
  constexpr std::size_t impossible = std::numeric_limits<std::size_t>::max();
  std::vector<std::vector<std::size_t>> best(pp + 1, std::vector<std::size_t>(n + 1, impossible));
  best[0][n] = 0;
  for (int k = 1; k <= pp; ++k)
    for (int i = 0; i + k <= n; ++i)
      for (int e = i + 1; e + (k - 1) <= n; ++e)
        if (best[k - 1][e] != impossible) best[k][i] = std::min(best[k][i], std::max(sum(i, e), best[k - 1][e]));
  const std::size_t limit = best[pp][0];

  // Earliest cuts: each stage ends at the first layer that still lets the rest fit under the optimum.
  std::vector<int> cuts;
  int first = 0;
  for (int k = pp; k > 1; --k) {
    int end = first + 1;
    while (sum(first, end) > limit || best[k - 1][end] > limit) ++end;
    cuts.push_back(end);
    first = end;
  }
  return from_cuts(cuts, n);
}

std::vector<StageRange> uniform(int layer_count, int pp) {
  std::vector<int> cuts;
  int end = 0;
  for (int s = 0; s + 1 < pp; ++s) {
    end += layer_count / pp + (s < layer_count % pp ? 1 : 0);
    cuts.push_back(end);
  }
  return from_cuts(cuts, layer_count);
}

std::string trimmed(const std::string& s) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  const auto b = std::find_if_not(s.begin(), s.end(), space);
  const auto e = std::find_if_not(s.rbegin(), s.rend(), space).base();
  return b < e ? std::string(b, e) : std::string();
}

std::vector<std::string> split_list(const std::string& spec) {
  std::vector<std::string> entries;
  if (trimmed(spec).empty()) return entries;
  std::size_t start = 0;
  for (;;) {
    const auto comma = spec.find(',', start);
    entries.push_back(trimmed(spec.substr(start, comma - start)));
    if (comma == std::string::npos) return entries;
    start = comma + 1;
  }
}

int layer_index(const std::vector<LayerCost>& layers, const std::string& entry, const std::string& spec) {
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (layers[i].name == entry) return int(i);
  const std::string option = "parallel.partition = '" + spec + "'";
  if (all_digits(entry)) {
    std::size_t index = 0;
    const auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), index);
    require(ec == std::errc() && index < layers.size(),
            option + ": index " + entry + " is past the last layer (indices 0.." + std::to_string(layers.size() - 1) +
                ": " + layer_summary(layers) + ")");
    return int(index);
  }
  throw Error(option + ": no layer '" + entry + "' (layers: " + layer_summary(layers) +
              "; or give 'params', 'uniform' or layer indices)");
}

std::vector<StageRange> explicit_cuts(const std::vector<LayerCost>& layers, int pp, const std::string& spec) {
  const auto entries = split_list(spec);
  const auto needed = std::size_t(pp - 1);
  require(entries.size() == needed, "parallel.partition = '" + spec + "' gives " + std::to_string(entries.size()) +
                                        (entries.size() == 1 ? " boundary" : " boundaries") +
                                        " for parallel.pp = " + std::to_string(pp) + " (needs " +
                                        std::to_string(needed) + ": the first layer of each stage after the first)");
  std::vector<int> cuts;
  for (const auto& entry : entries) {
    const int cut = layer_index(layers, entry, spec);
    const std::string where = "parallel.partition = '" + spec + "': boundary '" + entry + "' (layer " +
                              std::to_string(cut) + ")";
    require(cut > 0, where + " would leave stage 0 empty");
    require(cuts.empty() || cut > cuts.back(),
            where + " does not come after layer " + std::to_string(cuts.empty() ? 0 : cuts.back()) +
                "; boundaries must be strictly increasing so no stage is empty");
    cuts.push_back(cut);
  }
  return from_cuts(cuts, int(layers.size()));
}

}  // namespace

std::vector<StageRange> partition_stages(const std::vector<LayerCost>& layers, int pp, const std::string& spec) {
  require(pp >= 1, "parallel.pp = " + std::to_string(pp) + ": must be >= 1");
  require(std::size_t(pp) <= layers.size(),
          "parallel.pp = " + std::to_string(pp) + ": the model has " + std::to_string(layers.size()) + " layers (" +
              layer_summary(layers) + "); a stage needs at least one");
  if (spec == "params") return by_params(layers, pp);
  if (spec == "uniform") return uniform(int(layers.size()), pp);
  return explicit_cuts(layers, pp, spec);
}

}  // namespace avtrain::parallel
