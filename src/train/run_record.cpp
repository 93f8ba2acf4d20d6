#include "train/run_record.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace avtrain {

namespace {
std::string clock_time(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  std::ostringstream out;
  out << s / 3600 << ":" << std::setw(2) << std::setfill('0') << (s / 60) % 60 << ":" << std::setw(2) << s % 60;
  return out.str();
}
}  // namespace

RunRecord::RunRecord(const RunConfig& config, const parallel::Topology& topo) : config_(config), topo_(topo) {}

void RunRecord::open(nlohmann::json manifest, bool resumed, std::int64_t first_step) {
  const std::string& out = config_.train.out;
  if (out.empty() || topo_.rank != 0) return;
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw Error("cannot create output directory " + out + ": " + ec.message());
  nlohmann::json starts = nlohmann::json::array();
  if (resumed) {
    std::ifstream previous(out + "/run.json");
    try {
      nlohmann::json old;
      if (previous >> old; old.contains("starts")) starts = old["starts"];
    } catch (const nlohmann::json::exception&) {
    }
  }
  nlohmann::json start = {{"time", std::time(nullptr)}, {"step", first_step}, {"ranks", topo_.world},
                          {"pp", topo_.pp}, {"dp", topo_.dp}, {"cp", topo_.cp}};
  for (const char* slurm : {"SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"})
    if (const char* value = std::getenv(slurm)) start[slurm] = value;
  starts.push_back(start);
  manifest["starts"] = starts;
  write_file_atomically(out + "/run.json", manifest.dump(2) + "\n");
  traces_ = std::make_unique<TraceWriter>(out, resumed ? first_step : -1);
  // A fresh start replaces the event files of an earlier start as it replaces trace.csv; a resumed
  // run keeps them (its lower steps make TensorBoard drop their later ones).
  if (!resumed) remove_event_files(out);
  if (config_.train.tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(out);
}

void RunRecord::write(const StepRow& row, const std::vector<LayerRow>& layers, const std::vector<RankRow>& ranks) {
  if (!traces_) return;
  traces_->write_step(row);
  traces_->write_layers(std::int64_t(row["step"]), layers);
  traces_->write_ranks(ranks);
  if (tensorboard_) tensorboard_->write_step(row, layers);
}

void RunRecord::evaluation_took(double s) {
  longest_eval_s_ = std::max(longest_eval_s_, s);
  eval_s_ += s;
  ++evaluations_;
}

double RunRecord::median_step_ms() const {
  if (step_ms_.empty()) return 0;
  std::vector<double> sorted = step_ms_;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

double RunRecord::recent_step_s() const {
  if (step_ms_.empty()) return 0;
  const std::size_t n = std::min<std::size_t>(21, step_ms_.size());
  std::vector<double> last(step_ms_.end() - std::ptrdiff_t(n), step_ms_.end());
  std::nth_element(last.begin(), last.begin() + std::ptrdiff_t(n / 2), last.end());
  return last[n / 2] / 1000.0;
}

double RunRecord::eta_s(std::int64_t step) const {
  const std::int64_t left = config_.train.steps - (step + 1);
  if (left <= 0) return 0;
  const int interval = config_.train.eval_interval;
  const std::int64_t evals_left = interval > 0 ? (config_.train.steps / interval) - ((step + 1) / interval) : 1;
  const double eval_s = evaluations_ ? eval_s_ / evaluations_ : 0.0;
  return double(left) * recent_step_s() + double(std::max<std::int64_t>(evals_left, 1)) * eval_s;
}

void RunRecord::log_step(std::ostream& log, const StepRow& row, int skipped, double elapsed_s) const {
  const int interval = config_.train.log_interval;
  const std::int64_t step = std::int64_t(row["step"]);
  const bool last = step + 1 == config_.train.steps;
  const bool due = (interval > 0 && (step + 1) % interval == 0) || last || row.has("val_acc");
  if (topo_.rank != 0 || !due) return;
  log << "[rank 0] step " << std::setw(5) << step + 1 << "/" << config_.train.steps << "  loss "
      << std::setprecision(4) << row["loss"] << "  grad_norm " << std::setprecision(3) << row["grad_norm"] << "  lr "
      << std::scientific << std::setprecision(2) << row["lr"] << std::fixed << "  " << std::setprecision(1)
      << row["step_ms"] << " ms";
  if (topo_.pp > 1) log << "  bubble " << std::setprecision(3) << row["bubble"];
  if (topo_.stage_size() > 1) log << "  comm " << std::setprecision(1) << row["comm_ms"] << " ms";
  if (skipped >= 0) log << "  scale " << std::setprecision(0) << row["loss_scale"] << "  skipped " << skipped;
  if (row.has("val_acc"))
    log << "  val_loss " << std::setprecision(4) << row["val_loss"] << "  val_acc " << row["val_acc"] << "  val_mAP "
        << row["val_map"];
  log << "  " << std::setprecision(0) << row["samples_per_s"] << " samples/s  elapsed " << clock_time(elapsed_s)
      << "  eta " << clock_time(eta_s(step));
  log << std::endl;
}

}  // namespace avtrain
