#include "io/trace_writer.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace avtrain {

namespace {
std::FILE* open_for_writing(const std::string& path, const char* mode = "w") {
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno));
  return f;
}

// Keeps the header and the rows of steps before `step` (the first field) of a CSV file written
// by an earlier start of this run, and opens it for appending.
std::FILE* continue_file(const std::string& path, const std::string& header, std::int64_t step) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": missing, but the run resumes from a checkpoint: cannot continue its traces");
  std::string line, kept;
  if (!std::getline(in, line) || line != header)
    throw Error(path + ": another header than this build writes: cannot continue it");
  kept = line + "\n";
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::string first = line.substr(0, line.find(','));
    char* end = nullptr;
    const long long s = std::strtoll(first.c_str(), &end, 10);
    if (end == first.c_str() || *end != '\0') continue;  // a row cut short by a kill
    if (s < step) kept += line + "\n";
  }
  in.close();
  write_file_atomically(path, kept);
  return open_for_writing(path, "a");
}
}  // namespace

std::string format_field(const TraceColumn& column, const std::optional<double>& value) {
  if (!value) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, column.format, *value);
  return buf;
}

TraceWriter::TraceWriter(const std::string& dir, std::int64_t continue_at) : dir_(dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create output directory " + dir + ": " + ec.message());
  if (continue_at >= 0) {
    trace_.reset(continue_file(dir + "/trace.csv", trace_header(kStepColumns), continue_at));
    layers_.reset(continue_file(dir + "/layers.csv", trace_header(kLayerColumns), continue_at));
    ranks_.reset(continue_file(dir + "/ranks.csv", trace_header(kRankColumns), continue_at));
    return;
  }
  trace_.reset(open_for_writing(dir + "/trace.csv"));
  layers_.reset(open_for_writing(dir + "/layers.csv"));
  ranks_.reset(open_for_writing(dir + "/ranks.csv"));
  std::fprintf(trace_.get(), "%s\n", trace_header(kStepColumns).c_str());
  std::fprintf(layers_.get(), "%s\n", trace_header(kLayerColumns).c_str());
  std::fprintf(ranks_.get(), "%s\n", trace_header(kRankColumns).c_str());
  std::fflush(trace_.get());
  std::fflush(layers_.get());
  std::fflush(ranks_.get());
}

void TraceWriter::write_step(const StepRow& r) {
  std::fprintf(trace_.get(), "%s\n", trace_line<kStepColumns>(r).c_str());
  if (std::fflush(trace_.get()) != 0) throw Error("cannot write " + dir_ + "/trace.csv: " + std::strerror(errno));
}

static_assert(std::size(kLayerColumns) == kFp8LayerColumnsFirst + kFp8LayerColumns &&
                  std::string_view(kLayerColumns[kFp8LayerColumnsFirst].name) == "fp8_x_amax" &&
                  std::string_view(kLayerColumns[kFp8LayerColumnsFirst - 1].name) == "nonfinite",
              "layers.csv: the fp8 columns are the last ones, after nonfinite (write_layers writes them so)");

void TraceWriter::write_layers(std::int64_t step, const std::vector<LayerRow>& rows) {
  for (const LayerRow& r : rows) {
    char act[32] = "";
    if (r.act_absmax) std::snprintf(act, sizeof act, "%.9g", double(*r.act_absmax));
    std::string fp8;
    for (std::size_t i = 0; i < kFp8LayerColumns; ++i) {
      fp8 += ',';
      fp8 += format_field(kLayerColumns[kFp8LayerColumnsFirst + i], r.fp8[i]);
    }
    std::fprintf(layers_.get(), "%lld,%s,%.17g,%.17g,%s,%.17g,%llu%s\n", static_cast<long long>(step),
                 r.layer.c_str(), r.grad_norm, r.param_norm, act, r.grad_underflow_frac,
                 static_cast<unsigned long long>(r.nonfinite), fp8.c_str());
  }
  if (std::fflush(layers_.get()) != 0) throw Error("cannot write " + dir_ + "/layers.csv: " + std::strerror(errno));
}

void TraceWriter::write_ranks(const std::vector<RankRow>& rows) {
  for (const RankRow& r : rows) std::fprintf(ranks_.get(), "%s\n", trace_line<kRankColumns>(r).c_str());
  if (std::fflush(ranks_.get()) != 0) throw Error("cannot write " + dir_ + "/ranks.csv: " + std::strerror(errno));
}

}  // namespace avtrain
