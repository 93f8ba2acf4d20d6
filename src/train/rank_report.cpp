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

std::string encode_report(const RankReport& report) {
  const RankRow& r = report.row;
  std::ostringstream out;
  out << r.step << ' ' << r.rank << ' ' << r.pp_rank << ' ' << r.dp_rank << ' '
      << (r.local_loss ? number(*r.local_loss) : "-") << ' ' << number(r.loss_scale) << ' '
      << number(r.grad_norm_local) << ' ' << number(r.act_mb) << ' ' << number(r.step_ms) << ' '
      << number(r.schedule_ms) << ' ' << number(r.idle_ms) << ' ' << number(r.comm_ms) << ' '
      << number(r.data_wait_ms) << ' ' << r.grad_bytes << ' ' << report.layers.size() << '\n';
  for (const LayerRow& l : report.layers)
    out << l.layer << ' ' << number(l.grad_norm) << ' ' << number(l.param_norm) << ' '
        << (l.act_absmax ? number(*l.act_absmax) : "-") << ' ' << number(l.grad_underflow_frac) << ' ' << l.nonfinite
        << '\n';
  return out.str();
}

RankReport decode_report(const std::string& text) {
  std::istringstream in(text);
  RankReport report;
  RankRow& r = report.row;
  std::string word;
  std::size_t layers = 0;
  in >> r.step >> r.rank >> r.pp_rank >> r.dp_rank >> word;
  if (word != "-") r.local_loss = std::strtod(word.c_str(), nullptr);
  r.loss_scale = read_number(in);
  r.grad_norm_local = read_number(in);
  r.act_mb = read_number(in);
  r.step_ms = read_number(in);
  r.schedule_ms = read_number(in);
  r.idle_ms = read_number(in);
  r.comm_ms = read_number(in);
  r.data_wait_ms = read_number(in);
  in >> r.grad_bytes >> layers;
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
    require(rr.pp_rank >= 0 && rr.pp_rank < pp, "internal: rank report of stage " + std::to_string(rr.pp_rank));
    row.step_ms = std::max(row.step_ms, rr.step_ms);
    row.data_wait_ms = std::max(row.data_wait_ms, rr.data_wait_ms);
    row.act_mb = std::max(row.act_mb, rr.act_mb);
    stage_comm[std::size_t(rr.pp_rank)] = std::min(stage_comm[std::size_t(rr.pp_rank)], rr.comm_ms);
    if (pp > 1 && rr.schedule_ms > 0) row.bubble = std::max(row.bubble, rr.idle_ms / rr.schedule_ms);
    for (LayerRow& l : r.layers) layers.push_back(std::move(l));
    ranks.push_back(rr);
  }
  row.comm_ms = stage_comm.empty() ? 0.0 : *std::max_element(stage_comm.begin(), stage_comm.end());
}

}  // namespace avtrain
