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

// Rank 0's reading of every rank's report (in rank order, pp stages): fills the step row's
// largest-over-ranks columns (step_ms, data_wait_ms, act_mb, bubble), its exposed comm_ms (per
// stage the wait of the replica that finished backward last, largest over the stages), and
// collects the ranks.csv rows and the layers.csv rows (stage 0's modules first).
void merge_reports(const std::vector<std::string>& reports, int pp, StepRow& row, std::vector<RankRow>& ranks,
                   std::vector<LayerRow>& layers);

}  // namespace avtrain
