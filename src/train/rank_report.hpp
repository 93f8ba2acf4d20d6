#pragma once
// What each rank tells rank 0 after a step: its RankRow and, from one replica per stage, the
// layers.csv rows of its stage's modules. Text with %.17g numbers, so values read back to the same
// bits, inf and NaN included (what a step that overflows has to report).
#include <string>
#include <vector>

#include "io/trace_writer.hpp"

namespace avtrain {

struct RankReport {
  RankRow row;
  std::vector<LayerRow> layers;
};

std::string encode_report(const RankReport& report);
// Throws Error on text that encode_report did not write.
RankReport decode_report(const std::string& text);

}  // namespace avtrain
