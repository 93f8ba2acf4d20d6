#include "pack/pack_state.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.hpp"

namespace fs = std::filesystem;

namespace avtrain::pack {

namespace {

fs::path state_dir(const PackPlan& plan) { return fs::path(plan.options.out) / ".pack"; }

fs::path record_path(const PackPlan& plan, int shard) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05d.json", shard);
  return state_dir(plan) / name;
}

void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw Error(temporary.string() + ": cannot write (disk full?)");
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  if (ec) throw Error(path.string() + ": cannot rename " + temporary.string() + " into place: " + ec.message());
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

std::string first_difference(const nlohmann::json& was, const nlohmann::json& now) {
  for (auto it = now.begin(); it != now.end(); ++it) {
    if (!was.contains(it.key())) return it.key() + " (not recorded)";
    if (was[it.key()] != *it) {
      if (it.key() == "classes" || it.key() == "clips_digest") return it.key();
      return it.key() + " (" + was[it.key()].dump() + " before, " + it->dump() + " now)";
    }
  }
  return "";
}

// The shard's record when the shard is finished (its record exists and, if it has samples, its file).
std::optional<nlohmann::json> finished_record(const PackPlan& plan, int shard) {
  const fs::path record = record_path(plan, shard);
  std::error_code ec;
  if (!fs::exists(record, ec)) return std::nullopt;
  nlohmann::json j = read_json(record);
  if (j.value("samples", std::int64_t(0)) > 0 && !fs::exists(plan.shard_path(shard), ec)) return std::nullopt;
  return j;
}

}  // namespace

void prepare_output(const PackPlan& plan, bool overwrite) {
  const fs::path out = plan.options.out;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw Error(out.string() + ": cannot create the output folder: " + ec.message());
  const fs::path plan_file = state_dir(plan) / "plan.json";
  if (overwrite) {
    for (const fs::directory_entry& entry : fs::directory_iterator(out, ec)) {
      const std::string name = entry.path().filename().string();
      const bool shard = name.starts_with("shard-") && (name.ends_with(".h5") || name.ends_with(".h5.tmp"));
      if (shard || name == "pack-report.csv") fs::remove(entry.path(), ec);
    }
    fs::remove_all(state_dir(plan), ec);
  }
  const nlohmann::json description = plan.description();
  if (fs::exists(plan_file)) {
    const std::string differs = first_difference(read_json(plan_file), description);
    if (!differs.empty()) {
      throw Error(out.string() + " holds a pack made with another " + differs +
                  "; use another --out, or --overwrite to start it again");
    }
  } else {
    for (const fs::directory_entry& entry : fs::directory_iterator(out, ec)) {
      if (entry.path().extension() == ".h5") {
        throw Error(out.string() + " holds shard files (" + entry.path().filename().string() +
                    ") that no pack started; use another --out, or --overwrite to replace them");
      }
    }
    fs::create_directories(state_dir(plan), ec);
    if (ec) throw Error(state_dir(plan).string() + ": cannot create: " + ec.message());
    write_atomically(plan_file, description.dump(2) + "\n");
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(out, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".h5.tmp")) fs::remove(entry.path(), ec);
  }
}


bool shard_finished(const PackPlan& plan, int shard) { return finished_record(plan, shard).has_value(); }

void record_shard(const PackPlan& plan, const ShardOutcome& outcome) {
  const auto rows = [](const std::vector<ClipFailure>& clips) {
    nlohmann::json rows = nlohmann::json::array();
    for (const ClipFailure& f : clips)
      rows.push_back({{"line", f.line}, {"path", f.path}, {"start", f.start}, {"reason", f.reason}});
    return rows;
  };
  const nlohmann::json j = {{"shard", outcome.shard},
                            {"samples", outcome.samples},
                            {"failures", rows(outcome.failures)},
                            {"warnings", rows(outcome.warnings)}};
  write_atomically(record_path(plan, outcome.shard), j.dump(1) + "\n");
}

std::vector<ShardOutcome> read_outcomes(const PackPlan& plan) {
  std::vector<ShardOutcome> outcomes;
  for (int shard = 0; shard < plan.shards(); ++shard) {
    const std::optional<nlohmann::json> record = finished_record(plan, shard);
    if (!record) continue;
    const nlohmann::json& j = *record;
    ShardOutcome o;
    o.shard = shard;
    o.samples = j.value("samples", std::int64_t(0));
    const auto rows = [](const nlohmann::json& from, std::vector<ClipFailure>& to) {
      for (const auto& f : from)
        to.push_back({f.at("line").get<std::int64_t>(), f.at("path").get<std::string>(), f.at("start").get<double>(),
                      f.at("reason").get<std::string>()});
    };
    rows(j.at("failures"), o.failures);
    if (j.contains("warnings")) rows(j.at("warnings"), o.warnings);  // records of packs before warnings had none
    outcomes.push_back(std::move(o));
  }
  return outcomes;
}

std::string write_report(const PackPlan& plan, const std::vector<ShardOutcome>& outcomes) {
  std::ostringstream csv;
  csv << "line,path,start,status,reason\n";
  for (const ShardOutcome& o : outcomes) {
    // A shard's skipped and warned clips, in list order (the lines rise along the list).
    std::vector<std::pair<const ClipFailure*, const char*>> rows;
    for (const ClipFailure& f : o.failures) rows.emplace_back(&f, "skipped");
    for (const ClipFailure& f : o.warnings) rows.emplace_back(&f, "warning");
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first->line < b.first->line; });
    for (const auto& [f, status] : rows) {
      std::ostringstream start;
      start << f->start;
      csv << f->line << ',' << csv_field(f->path) << ',' << start.str() << ',' << status << ',' << csv_field(f->reason)
          << '\n';
    }
  }
  const fs::path report = fs::path(plan.options.out) / "pack-report.csv";
  write_atomically(report, csv.str());
  return report.string();
}

}  // namespace avtrain::pack
