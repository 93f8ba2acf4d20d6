#include "checkpoint/torch_names.hpp"

#include <array>
#include <string_view>

namespace avtrain::checkpoint {

namespace {
// The last component of the tensors that are avtrain's step state, not the model's.
constexpr std::array<std::string_view, 1> kStepStateLeaves = {"batch_stat_sums"};
}  // namespace

std::optional<std::string> torch_name(const std::string& name) {
  const std::string_view leaf = std::string_view(name).substr(name.rfind('.') + 1);
  for (std::string_view s : kStepStateLeaves)
    if (leaf == s) return std::nullopt;
  return name;
}

}  // namespace avtrain::checkpoint
