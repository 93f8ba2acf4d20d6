#include "train/rank_report.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/error.hpp"

namespace avtrain {

namespace {
std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

double read_number(std::istream& in) {
  std::string word;
  in >> word;
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  require(!word.empty() && *end == '\0', "internal: malformed rank report field '" + word + "'");
  return v;
}
}  // namespace

// The row's columns in ranks.csv's order ("-" for none), the number of layer rows, then those rows.
std::string encode_report(const RankReport& report) {
  std::ostringstream out;
  for (std::size_t i = 0; i < RankRow::kCount; ++i) {
    const std::optional<double>& v = report.row.at(i);
    out << (v ? number(*v) : "-") << ' ';
  }
  out << report.layers.size() << '\n';
  for (const LayerRow& l : report.layers) {
    out << l.layer << ' ' << number(l.grad_norm) << ' ' << number(l.param_norm) << ' '
        << (l.act_absmax ? number(*l.act_absmax) : "-") << ' ' << number(l.grad_underflow_frac) << ' ' << l.nonfinite;
    for (const std::optional<double>& v : l.fp8) out << ' ' << (v ? number(*v) : "-");
    out << '\n';
  }
  return out.str();
}

RankReport decode_report(const std::string& text) {
  std::istringstream in(text);
  RankReport report;
  std::string word;
  for (std::size_t i = 0; i < RankRow::kCount; ++i) {
    in >> word;
    if (word == "-") {
      report.row.at(i).reset();
      continue;
    }
    char* end = nullptr;
    const double v = std::strtod(word.c_str(), &end);
    require(!word.empty() && *end == '\0', "internal: malformed rank report field '" + word + "'");
    report.row.at(i) = v;
  }
  std::size_t layers = 0;
  in >> layers;
  require(bool(in), "internal: malformed rank report");
  for (std::size_t i = 0; i < layers; ++i) {
    LayerRow l;
    in >> l.layer;
    l.grad_norm = read_number(in);
    l.param_norm = read_number(in);
    in >> word;
    if (word != "-") l.act_absmax = std::strtof(word.c_str(), nullptr);
    l.grad_underflow_frac = read_number(in);
    in >> l.nonfinite;
    for (std::optional<double>& v : l.fp8) {
      in >> word;
      if (word != "-") {
        char* end = nullptr;
        v = std::strtod(word.c_str(), &end);
        require(!word.empty() && *end == '\0', "internal: malformed rank report field '" + word + "'");
      }
    }
    require(bool(in), "internal: malformed layer row in a rank report");
    report.layers.push_back(std::move(l));
  }
  return report;
}

void merge_reports(const std::vector<std::string>& reports, int pp, StepRow& row, std::vector<RankRow>& ranks,
                   std::vector<LayerRow>& layers) {
  // The other replicas of a stage wait longer than the last to finish backward by the imbalance
  // between them (ranks.csv shows it rank by rank); what that last one waits is transfer left unhidden.
  std::vector<double> stage_comm(std::size_t(pp), std::numeric_limits<double>::infinity());
  for (const std::string& text : reports) {
    RankReport r = decode_report(text);
    const RankRow& rr = r.row;
    const int stage = int(rr["pp_rank"]);
    require(stage >= 0 && stage < pp, "internal: rank report of stage " + std::to_string(stage));
    const auto largest = [&](StepRow::Column to, RankRow::Column from) { row.set(to, std::max(row[to], rr[from])); };
    largest("step_ms", "step_ms");
    largest("data_wait_ms", "data_wait_ms");
    largest("act_mb", "act_mb");
    stage_comm[std::size_t(stage)] = std::min(stage_comm[std::size_t(stage)], rr["comm_ms"]);
    if (pp > 1 && rr["schedule_ms"] > 0) row.set("bubble", std::max(row["bubble"], rr["idle_ms"] / rr["schedule_ms"]));
    for (LayerRow& l : r.layers) layers.push_back(std::move(l));
    ranks.push_back(rr);
  }
  row.set("comm_ms", stage_comm.empty() ? 0.0 : *std::max_element(stage_comm.begin(), stage_comm.end()));
}

}  // namespace avtrain
