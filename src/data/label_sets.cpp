#include "data/label_sets.hpp"

#include "core/error.hpp"

namespace avtrain::data {

void check_label_sets(const std::string& path, std::int64_t first_row, const std::uint8_t* labels, std::int64_t rows,
                      int classes, const char* suffix, std::vector<std::int64_t>* histogram) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* row = labels + r * classes;
    int present = 0;
    for (int c = 0; c < classes; ++c) {
      if (row[c] > 1) {
        throw Error(path + ": /labels[" + std::to_string(first_row + r) + ", " + std::to_string(c) + "] = " +
                    std::to_string(row[c]) + " is not 0 or 1" + suffix);
      }
      present += row[c];
      if (histogram != nullptr && row[c] != 0) ++(*histogram)[static_cast<std::size_t>(c)];
    }
    if (present == 0)
      throw Error(path + ": /labels[" + std::to_string(first_row + r) + "] holds no class (a sample needs one at least)" +
                  suffix);
  }
}

std::vector<std::int32_t> first_classes(const std::uint8_t* labels, std::int64_t rows, int classes) {
  std::vector<std::int32_t> first(static_cast<std::size_t>(rows), -1);
  for (std::int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < classes; ++c)
      if (labels[r * classes + c] != 0) {
        first[static_cast<std::size_t>(r)] = c;
        break;
      }
  return first;
}

}  // namespace avtrain::data
