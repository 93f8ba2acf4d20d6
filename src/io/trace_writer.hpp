#pragma once
// trace.csv (one row per step), layers.csv (one row per step and layer) and ranks.csv (one row per
// step and rank), their columns as io/trace_columns.hpp's tables say, flushed every step so a killed
// run keeps what it wrote. Floats are written with %.9g and doubles with %.17g so they read back to
// the same bits.
#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/trace_columns.hpp"

namespace avtrain {

struct LayerRow {
  std::string layer;
  double grad_norm = 0, param_norm = 0;
  std::optional<float> act_absmax;
  double grad_underflow_frac = 0;
  std::uint64_t nonfinite = 0;
  // The fp8 columns in their order (kLayerColumns from kFp8LayerColumnsFirst): none outside FP8 linears.
  std::array<std::optional<double>, kFp8LayerColumns> fp8{};
};

class TraceWriter {
 public:
  // Creates DIR (and parents) and starts the files with their headers. With continue_at >= 0 (a
  // resumed run) the files already there are kept up to the rows of step continue_at, which is
  // where the new rows go on: every step appears once.
  explicit TraceWriter(const std::string& dir, std::int64_t continue_at = -1);
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  void write_step(const StepRow& row);
  void write_layers(std::int64_t step, const std::vector<LayerRow>& rows);
  void write_ranks(const std::vector<RankRow>& rows);


 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  using File = std::unique_ptr<std::FILE, Close>;
  std::string dir_;
  File trace_, layers_, ranks_;
};

}  // namespace avtrain
