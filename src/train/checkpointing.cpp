#include "train/checkpointing.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "parallel/zero_parts.hpp"

namespace avtrain {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Rethrows an agreed failure: the failing rank's message there, ErrorElsewhere on the others.
void fail(const std::pair<std::string, bool>& r) {
  if (!r.second) return;
  if (r.first.empty()) throw ErrorElsewhere();
  throw Error(r.first);
}

std::string step_name(std::int64_t next_step) {
  std::ostringstream s;
  s << "step-" << std::setw(7) << std::setfill('0') << next_step;
  return s.str();
}

}  // namespace

Checkpointing::Checkpointing(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world)
    : config_(config), topo_(topo), world_(world), last_save_(Clock::now()) {
  dir_ = !config.checkpoint.dir.empty() ? config.checkpoint.dir
         : config.train.out.empty()     ? std::string()
                                        : config.train.out + "/checkpoints";
  if (const std::string& h = config.debug.hold_checkpoint; !h.empty()) {
    static const std::regex form("(copy|stage_file|commit):([0-9]+)");
    std::smatch m;
    require(std::regex_match(h, m, form), "option debug.hold_checkpoint = '" + h +
                                              "': expected POINT:STEP, POINT one of copy, stage_file, commit");
    hold_at_ = m[1] == "copy" ? HoldPoint::copy : m[1] == "stage_file" ? HoldPoint::stage_file : HoldPoint::commit;
    hold_step_ = std::stoll(m[2]);
  }
}

std::function<void()> Checkpointing::hold(int rank, const std::string& checkpoint, const char* point) {
  return [rank, checkpoint, point] {
    std::cerr << "[rank " << rank << "] debug.hold_checkpoint: holding " << checkpoint << " at " << point
              << " until killed" << std::endl;
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  };
}

std::vector<std::string> Checkpointing::committed() const {
  std::vector<std::string> out;
  std::error_code ec;
  if (dir_.empty() || !fs::is_directory(dir_, ec)) return out;
  static const std::regex name("step-[0-9]{7,}");
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (e.is_directory() && std::regex_match(e.path().filename().string(), name) &&
        fs::is_regular_file(e.path() / "committed"))
      out.push_back(e.path().string());
  // By step: the numbers have 7 digits or more, so a longer name is a later step.
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return out;
}

int Checkpointing::remove_all() {
  std::error_code ec;
  if (dir_.empty() || !fs::is_directory(dir_, ec)) return 0;
  const std::vector<std::string> done = committed();
  for (const std::string& ck : done) {
    fs::remove(ck + "/committed", ec);  // uncommitted first, so a half-deleted one is never loaded
    if (ec) throw Error("--overwrite: cannot remove " + ck + "/committed: " + ec.message());
  }
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0) steps.push_back(e.path());
  for (const fs::path& step : steps)
    if (fs::remove_all(step, ec); ec) throw Error("--overwrite: cannot remove " + step.string() + ": " + ec.message());
  if (fs::remove(dir_ + "/latest", ec); ec) throw Error("--overwrite: cannot remove " + dir_ + "/latest: " + ec.message());
  return int(done.size());
}

std::vector<std::string> Checkpointing::stage_files(const std::string& checkpoint) {
  const std::string marker = checkpoint + "/committed";
  std::ifstream in(marker);
  require(bool(in), "checkpoint " + checkpoint + ": not a committed checkpoint (no " + marker + ")");
  nlohmann::json m;
  try {
    in >> m;
  } catch (const nlohmann::json::exception&) {
    throw Error("checkpoint " + marker + ": not JSON");
  }
  require(m.contains("stages") && m["stages"].is_number_integer() && m["stages"].get<int>() >= 1,
          "checkpoint " + marker + ": no stage count");
  // Written by replica: "files_per_stage" (absent before the parallel write: 1).
  const nlohmann::json per_stage = m.value("files_per_stage", nlohmann::json(1));
  require(per_stage.is_number_integer() && per_stage.get<int>() >= 1,
          "checkpoint " + marker + ": files_per_stage is not a positive integer");
  std::vector<std::string> files;
  for (int s = 0; s < m["stages"].get<int>(); ++s)
    for (int r = 0; r < per_stage.get<int>(); ++r) files.push_back(checkpoint + "/" + stage_file_name(s, r));
  return files;
}

std::string Checkpointing::stage_file_name(int stage, int replica) {
  const std::string s = "stage-" + std::to_string(stage);
  return replica == 0 ? s + ".h5" : s + ".part-" + std::to_string(replica) + ".h5";
}

std::pair<std::string, bool> Checkpointing::agree(const std::function<void()>& f) {
  std::string message;
  double failed = 0;
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
    failed = 1;
  }
  world_.all_reduce(&failed, 1, parallel::ReduceOp::max);
  return {message, failed > 0};
}

std::optional<checkpoint::Counters> Checkpointing::resume(Backend& be, DistributedOptimizer& state, bool moments,
                                                          const nlohmann::json& fingerprint, std::ostream& log,
                                                          Fp8Linears* fp8) {
  const std::string& how = config_.resume;
  if (how == "none" || config_.overwrite) return std::nullopt;
  std::vector<std::string> candidates;
  const bool automatic = how == "auto";
  if (automatic) {
    candidates = committed();
    std::reverse(candidates.begin(), candidates.end());
    if (candidates.empty()) return std::nullopt;
  } else {
    candidates.push_back(how);
  }
  for (const std::string& ck : candidates) {
    const auto t0 = Clock::now();
    std::optional<checkpoint::Checkpoint> opened;
    auto [message, failed] = agree([&] { opened.emplace(stage_files(ck)); });
    if (!failed) {
      // Evaluation (no moments loaded) does not depend on the batch: any layout evaluates any checkpoint.
      nlohmann::json theirs = opened->fingerprint(), ours = fingerprint;
      if (!moments) {
        theirs.erase("global_batch");
        ours.erase("global_batch");
      }
      const std::string diff = checkpoint::fingerprint_difference(theirs, ours);
      if (diff.rfind("global_batch:", 0) == 0) {
        nlohmann::json m;
        std::ifstream(ck + "/committed") >> m;
        auto breakdown = [](const nlohmann::json& mb, const nlohmann::json& mbs, const nlohmann::json& dp) {
          return mb.dump() + " x " + mbs.dump() + " x dp " + dp.dump();
        };
        throw Error("checkpoint " + ck + ": global batch " + opened->fingerprint()["global_batch"].dump() + " (" +
                    breakdown(m.value("micro_batch", nlohmann::json()), m.value("micro_batches", nlohmann::json()),
                              m.value("dp", nlohmann::json())) +
                    "), this run's " + fingerprint["global_batch"].dump() + " (" +
                    breakdown(config_.train.micro_batch, config_.train.micro_batches, topo_.dp) +
                    "): train.micro_batch x train.micro_batches x dp must give the same global batch");
      }
      require(diff.empty(), "checkpoint " + ck + " is of another run: " + diff);
      std::tie(message, failed) = agree([&] {
        opened->load(be, state.params(), moments ? &state.adamw() : nullptr);
        if (!fp8) return;
        const std::vector<std::string> modules = fp8->modules();
        for (std::size_t i = 0; i < modules.size(); ++i)
          fp8->restore(i, opened->tensor("fp8/" + modules[i], {std::uint64_t(fp8->state_size())}));
      });
      if (!failed) {
        world_.barrier();
        if (topo_.rank == 0)
          log << "[rank 0] resuming from " << ck << " (step " << opened->counters().next_step << "), loaded in "
              << std::setprecision(2) << std::fixed << std::chrono::duration<double>(Clock::now() - t0).count()
              << " s\n";
        loaded_ = ck;
        state.loaded(be);
        return opened->counters();
      }
    }
    if (!automatic) {
      if (message.empty()) throw ErrorElsewhere();
      throw Error(message);  // printed once, by main
    }
    if (!message.empty()) std::cerr << "avtrain: rank " << topo_.rank << ": " << message << std::endl;
    if (topo_.rank == 0) log << "[rank 0] checkpoint " << ck << " is damaged; trying the previous committed one\n";
  }
  throw Error("no usable checkpoint under " + dir_ + ": every committed one is damaged (see above); "
              "--resume none starts afresh");
}

// Each part's moments (and masters, where they are split) to the writer (rank 0 of the stage's
// dp x cp ranks), through a staging buffer of at most 16 MiB there, into its snapshot's
// host arrays.
void Checkpointing::gather_parts(Backend& be, DistributedOptimizer& state) {
  constexpr std::size_t kChunk = std::size_t(4) << 20;  // floats
  ParamStore& params = state.params();
  AdamW& adamw = state.adamw();
  const std::vector<std::size_t>& parts = state.parts();
  const std::size_t n = parts.back(), own = adamw.part().begin, own_end = adamw.part().end;
  const bool writer = topo_.stage_rank() == 0;
  Buffer staging;
  if (writer) staging.resize(std::min(kChunk, n));
  std::vector<std::pair<Buffer*, checkpoint::HostFloats*>> split = {{&adamw.first_moments(), &snapshot_->m},
                                                                    {&adamw.second_moments(), &snapshot_->v}};
  if (params.masters_split()) split.push_back({&params.masters(), &snapshot_->values});
  for (const auto& [part, host] : split) {
    if (writer) host->resize(n);
    for (std::size_t begin = 0; begin < n; begin += kChunk) {
      const std::size_t end = std::min(n, begin + kChunk);
      const float* mine = part->data() + (std::min(std::max(own, begin), own_end) - own);  // this chunk's share
      state.data_group()->gather(mine, writer ? staging.data() : nullptr, parallel::parts_within(parts, begin, end),
                                 DType::f32, 0);
      if (writer) be.download(host->data() + begin, staging.data(), (end - begin) * sizeof(float));
    }
  }
}

bool Checkpointing::by_part(const DistributedOptimizer& state) const {
  return state.sharded() && config_.checkpoint.zero_write == ZeroWrite::parallel;
}

void Checkpointing::reserve_memory(DistributedOptimizer& state) {
  if (!writes()) return;
  const ParamStore& params = state.params();
  if (by_part(state))
    snapshot_->reserve(params, state.adamw().part(), topo_.stage_rank() == 0);
  else if (topo_.stage_rank() == 0)
    snapshot_->reserve(params, FlatPart{0, params.total_size()}, true);
}

double Checkpointing::expected_seconds(const ParamStore& params) const {
  if (!writes()) return 0;
  if (longest_s_ > 0) return longest_s_;
  return 1.0 + 3.0 * double(params.total_size()) * sizeof(float) / (100.0 * (1 << 20));
}

std::string Checkpointing::why_none() const {
  return dir_.empty() ? "no --out or checkpoint.dir" : "checkpoint.interval -1";
}

bool Checkpointing::minutes_passed() const {
  if (!writes() || config_.checkpoint.minutes <= 0) return false;
  return std::chrono::duration<double>(Clock::now() - last_save_).count() / 60.0 >= config_.checkpoint.minutes;
}

bool Checkpointing::due(std::int64_t step, bool last, bool by_time) const {
  if (!writes()) return false;
  return last || by_time || (config_.checkpoint.interval > 0 && (step + 1) % config_.checkpoint.interval == 0);
}

Checkpointing::~Checkpointing() {
  if (in_flight_ && in_flight_->write.valid()) in_flight_->write.wait();
}

void Checkpointing::save(Backend& be, DistributedOptimizer& state, const checkpoint::Counters& counters,
                         const nlohmann::json& fingerprint, std::ostream& log) {
  const auto t0 = Clock::now();
  settle(true, log);  // one checkpoint in flight at a time
  InFlight next{dir_ + "/" + step_name(counters.next_step), counters, by_part(state) ? topo_.stage_size() : 1, {}, 0, 0};
  const std::string& ck = next.dir;
  // A directory of this name without its marker is a write that did not finish: start it again.
  fail(agree([&] {
    if (topo_.rank != 0) return;
    std::error_code ec;
    fs::remove(ck + "/committed", ec);
    fs::remove_all(ck, ec);
    fs::create_directories(ck, ec);
    if (ec) throw Error("cannot create checkpoint directory " + ck + ": " + ec.message());
  }));
  if (holds(HoldPoint::copy, counters.next_step)) hold(topo_.rank, ck, "copy")();
  const bool parts = by_part(state), gathered = state.sharded() && !parts;
  if (gathered) gather_parts(be, state);
  // Under ZeRO the stage's dp x cp ranks each own a part: the file of part stage_rank().
  if (parts || topo_.stage_rank() == 0) {
    // (the previous write has finished)
    if (parts)
      snapshot_->take_part(be, state.params(), state.adamw(), topo_.stage_rank() == 0, counters, fingerprint);
    else
      snapshot_->take(be, state.params(), gathered ? nullptr : &state.adamw(), counters, fingerprint);
    const std::string file = ck + "/" + stage_file_name(topo_.pp_rank, parts ? topo_.stage_rank() : 0);
    std::function<void()> before_rename;
    if (holds(HoldPoint::stage_file, counters.next_step)) before_rename = hold(topo_.rank, ck, "stage_file");
    next.write = std::async(std::launch::async, [snapshot = snapshot_, file, before_rename] {
      const auto t = Clock::now();
      checkpoint::write_stage(file, *snapshot, before_rename);
      return std::chrono::duration<double>(Clock::now() - t).count();
    });
  }
  next.pause_s = std::chrono::duration<double>(Clock::now() - t0).count();
  in_flight_ = std::move(next);
  last_save_ = Clock::now();
}

void Checkpointing::poll(std::ostream& log) { settle(false, log); }

void Checkpointing::finish(std::ostream& log) { settle(true, log); }

void Checkpointing::settle(bool wait, std::ostream& log) {
  if (!in_flight_) return;
  InFlight& f = *in_flight_;
  std::string message;
  double state[3] = {0, 0, 0};  // still writing, failed, the longest write's seconds
  if (f.write.valid()) {
    if (wait) f.write.wait();
    if (f.write.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      state[0] = 1;
    } else {
      try {
        f.write_s = f.write.get();
      } catch (const Error& e) {
        message = e.what();
        state[1] = 1;
      }
    }
  }
  state[2] = f.write_s;
  world_.all_reduce(state, 3, parallel::ReduceOp::max);
  if (state[1] > 0) {
    in_flight_.reset();
    if (message.empty()) throw ErrorElsewhere();
    throw Error(message);
  }
  if (state[0] > 0) return;  // some writer is not done: asked again at the next step
  f.write_s = state[2];  // the slowest writer's
  const InFlight done = std::move(f);
  in_flight_.reset();
  commit(done, log);
}

void Checkpointing::commit(const InFlight& done, std::ostream& log) {
  const std::string& ck = done.dir;
  // Every writer has finished: commit, point `latest` at it, and only then let the oldest go.
  fail(agree([&] {
    if (topo_.rank != 0) return;
    if (holds(HoldPoint::commit, done.counters.next_step)) hold(topo_.rank, ck, "commit")();
    const nlohmann::json marker = {{"step", done.counters.next_step}, {"stages", topo_.pp},
                                   {"files_per_stage", done.files_per_stage}, {"dp", topo_.dp}, {"cp", topo_.cp},
                                   {"micro_batch", config_.train.micro_batch},
                                   {"micro_batches", config_.train.micro_batches}};
    write_file_atomically(ck + "/committed", marker.dump() + "\n");
    write_file_atomically(dir_ + "/latest", fs::path(ck).filename().string() + "\n");
    std::vector<std::string> all = committed();
    std::error_code ec;
    for (std::size_t i = 0; i + std::size_t(config_.checkpoint.keep) < all.size(); ++i) {
      fs::remove(all[i] + "/committed", ec);  // uncommitted first, so a half-deleted one is never loaded
      fs::remove_all(all[i], ec);
    }
    // What a kill left half-written or half-deleted (no marker) goes too.
    for (const auto& e : fs::directory_iterator(dir_, ec))
      if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0 &&
          !fs::exists(e.path() / "committed") && e.path().string() != ck)
        fs::remove_all(e.path(), ec);
  }));
  longest_s_ = std::max(longest_s_, done.pause_s + done.write_s);
  if (topo_.rank == 0) {
    std::uintmax_t bytes = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(ck, ec))
      if (e.is_regular_file()) bytes += e.file_size();
    log << "[rank 0] checkpoint " << ck << ": " << std::setprecision(1) << std::fixed << double(bytes) / (1 << 20)
        << " MiB written in " << std::setprecision(2) << done.write_s << " s beside training, which paused "
        << done.pause_s << " s" << std::endl;
  }
}

}  // namespace avtrain
