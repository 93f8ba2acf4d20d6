#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iomanip>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/stop_signals.hpp"
#include "data/prefetcher.hpp"
#include "data/sampler.hpp"
#include "io/timeline.hpp"
#include "io/trace_writer.hpp"
#include "model/av_net.hpp"
#include "model/transformer_block.hpp"
#include "optim/distributed_optimizer.hpp"
#include "optim/grad_clip.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "precision/loss_scaler.hpp"
#include "precision/precision_policy.hpp"
#include "train/batch_feed.hpp"
#include "train/checkpointing.hpp"
#include "train/watchdog.hpp"
#include "train/rank_report.hpp"
#include "train/layer_statistics.hpp"
#include "train/run_manifest.hpp"
#include "train/run_record.hpp"
#include "train/time_budget.hpp"
#include "train/stage_link.hpp"
#include "train/stage_plan.hpp"

namespace avtrain {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kWatchdogFloor = 300.0;  // seconds: the automatic watchdog never fires sooner

// "RANK:STEP" of a debug option; {-1, -1} when empty.
std::pair<int, std::int64_t> parse_rank_step(const std::string& text, const char* option) {
  if (text.empty()) return {-1, -1};
  const auto colon = text.find(':');
  try {
    if (colon != std::string::npos) return {std::stoi(text.substr(0, colon)), std::stoll(text.substr(colon + 1))};
  } catch (const std::exception&) {
  }
  throw Error(std::string("option ") + option + " = '" + text + "': expected RANK:STEP, e.g. 1:3");
}

// A micro-batch in flight on this stage: its flow (tokens, mask, shapes), what its layers keep for
// backward, and its samples. Slots are reused, so their number is the most ever in flight.
struct Slot {
  Flow flow;
  std::vector<std::unique_ptr<LayerState>> states;
  data::MicroBatch batch;
  bool busy = false;
};

// What one step's phases read and add to.
struct StepWork {
  explicit StepWork(std::int64_t s) : step(s) {}
  std::int64_t step;
  Clock::time_point start;
  std::vector<std::future<data::MicroBatch>> parts;  // this replica's micro-batches (stages that read)
  double loss_scale = 1;
  float grad_scale = 1;
  bool inject_overflow = false;
  Timeline* timeline = nullptr;
  std::vector<Slot*> slot_of;  // micro-batch -> its slot while in flight
  ActivationStats acts;
  double local_loss = 0, train_ms = 0;
  bool loss_finite = true;
  std::size_t act_bytes = 0;
  std::uint64_t bytes_before = 0;  // the data-parallel group's bytes sent before the step
  RankRow row;  // this rank's row of ranks.csv, measured as the step goes (io/trace_columns.hpp)
};

}  // namespace

struct Trainer::Impl {
  const RunConfig& config;
  Backend& be;
  data::ShardSet& shards;
  data::ShardSet* val_shards;  // data.val_dir, or null: the validation split is part of `shards`
  parallel::ProcessGroups& groups;
  const parallel::Topology& topo;
  PrecisionPolicy policy;
  StagePlan plan;
  parallel::StageRange stage;
  DistributedOptimizer optimizer;  // the stage's parameters, their reduction, AdamW, the ZeRO parts
  ParamStore& params;
  AVNet net;
  RunManifest manifest;  // run.json's contents, the fingerprint
  std::optional<LayerStatistics> layer_statistics;  // layers.csv's rows of this stage
  std::vector<std::unique_ptr<Slot>> slots;
  StageLink link;
  parallel::Schedule schedule;
  std::pair<int, std::int64_t> inject_overflow, perturb_weights;
  std::vector<parallel::PipeAction> actions;  // this stage's forwards and backwards, in order
  double bubble_theory = 0;
  // The watchdog's last word: its line, then a few seconds in which the other ranks' watchdogs (their
  // waits began within a step of this one's) print theirs, then the job ends.
  Watchdog watchdog{[this](const std::string& line) {
    std::fprintf(stderr, "avtrain: rank %d: %s; aborting the job (exit %d)\n", topo.rank, line.c_str(), kExitNoProgress);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(5.0, watchdog.timeout())));
    groups.world->abort_job(kExitNoProgress);
  }};

  Impl(const RunConfig& c, Backend& b, data::ShardSet& s, data::ShardSet* v, parallel::ProcessGroups& g)
      : config(c), be(b), shards(s), val_shards(v), groups(g), topo(g.topology), policy(c.precision),
        plan(plan_stages(c, b, s.info(), g.topology.pp)), stage(plan.stages[g.topology.pp_rank]),
        optimizer(b, distributed_optimizer_config(c)), params(optimizer.params()),
        net(b, params, c.model, s.info(), policy, LayerRange{stage.first, stage.last},
            c.train.recompute),
        manifest(c, g.topology, b, policy, s, v),
        link(*g.pipeline, g.gradient_pipeline(), b, c.model.width),
        schedule(c.parallel.schedule),
        inject_overflow(parse_rank_step(c.debug.inject_overflow, "debug.inject_overflow")),
        perturb_weights(parse_rank_step(c.debug.perturb_weights, "debug.perturb_weights")) {
    optimizer.build(topo.dp, topo.dp_rank, g.data.get());
    layer_statistics.emplace(params);
    actions = parallel::pipeline_actions(schedule, topo.pp, topo.pp_rank, c.train.micro_batches);
    bubble_theory = parallel::ideal_bubble(topo.pp, c.train.micro_batches);
    watchdog.set_timeout(c.debug.watchdog_s >= 0 ? c.debug.watchdog_s : kWatchdogFloor);
  }

  // What this rank is doing, for the watchdog: "<what> of micro-batch m of step s[ to/from rank r]".
  enum class Peer { none, to, from };
  void mark(const char* what, const StepWork& w, int m, Peer direction = Peer::none, int peer = -1) {
    std::string phase = std::string(what) + " of micro-batch " + std::to_string(m) + " of step " + std::to_string(w.step);
    if (direction != Peer::none) phase += (direction == Peer::to ? " to rank " : " from rank ") + std::to_string(peer);
    watchdog.mark(std::move(phase));
  }
  std::string all_ranks() const {
    return topo.world <= 8 ? "all ranks: 0.." + std::to_string(topo.world - 1) : "all " + std::to_string(topo.world) + " ranks";
  }
  std::string data_group() const {
    std::string ranks;
    for (int r = 0; r < topo.dp; ++r) ranks += (r ? ", " : "") + std::to_string(topo.rank_of(topo.pp_rank, r));
    return "data-parallel group: ranks " + ranks;
  }
  // The automatic timeout (debug.watchdog_s -1): what a normal step, evaluation or checkpoint
  // never reach.
  void update_watchdog(const RunRecord& record, double longest_checkpoint_s) {
    if (config.debug.watchdog_s >= 0) return;
    watchdog.set_timeout(std::max({kWatchdogFloor, 20 * record.recent_step_s(), 3 * record.longest_evaluation_s(),
                                   3 * longest_checkpoint_s}));
  }

  bool amp() const { return policy.compute() != DType::f32; }
  // Waits for what a computation needs from a neighbour stage (`receive`, when there is one), then
  // completes this rank's sends in flight: over shared memory without single-copy support a send
  // moves only while its sender is inside MPI, so one left in flight would wait a whole forward or
  // backward. Completing costs nothing when the receiver already waits, which is how both
  // schedules are built. The time is the stage's idle time in the schedule.
  template <class Receive>
  void wait_for_neighbour(StepWork& w, int m, const char* what, Receive receive) {
    const auto t = Clock::now();
    const bool receives = receive();
    link.finish_sends();
    if (topo.pp == 1) return;
    w.row.add("idle_ms", ms_since(t));
    w.timeline->span(receives ? what : "complete sends", "recv", t, Clock::now(), w.step, m);
  }

  void forward(StepWork& w, int m) {
    Slot& slot = acquire();
    w.slot_of[m] = &slot;
    Flow& flow = slot.flow;
    if (!topo.first_stage()) mark("recv activation", w, m, Peer::from, topo.rank_of(topo.pp_rank - 1, topo.dp_rank));
    wait_for_neighbour(w, m, "recv activation", [&] {
      if (!topo.first_stage()) link.recv_activation(flow);
      return !topo.first_stage();
    });
    if (reads()) {
      mark("waiting for data", w, m);
      const auto t = Clock::now();
      slot.batch = w.parts[m].get();
      w.row.add("data_wait_ms", ms_since(t));
      flow.batch = &slot.batch;
    }
    flow.mode = Mode::train;
    flow.step = w.step;
    flow.detect_anomaly = config.precision.detect_anomaly;
    flow.grad_scale = w.grad_scale;
    flow.act_stats = &w.acts;
    mark("forward", w, m);
    const auto t = Clock::now();
    net.forward(flow, slot.states);
    w.timeline->span("forward", "forward", t, Clock::now(), w.step, m);
    w.act_bytes = std::max(w.act_bytes, activation_bytes());
    if (topo.last_stage()) {
      if (!std::isfinite(flow.loss)) {
        // fp32 has no excuse for it; in fp16/bf16 an overflow is what the scaler handles.
        if (policy.compute() == DType::f32 || config.precision.detect_anomaly)
          throw Error("step " + std::to_string(w.step) + ": the loss of micro-batch " + std::to_string(m) +
                      " is not finite (" + std::to_string(flow.loss) + ")");
        w.loss_finite = false;
      }
      w.local_loss += flow.loss / config.train.micro_batches;
    } else {
      mark("send activation", w, m, Peer::to, topo.rank_of(topo.pp_rank + 1, topo.dp_rank));
      const auto t_send = Clock::now();
      link.send_activation(flow);
      w.timeline->span("send activation", "send", t_send, Clock::now(), w.step, m);
    }
  }

  // The last micro-batch's backward launches each gradient bucket as soon as its layers are done.
  void backward(StepWork& w, int m, bool last_of_step) {
    Slot& slot = *w.slot_of[m];
    Flow& flow = slot.flow;
    if (!topo.last_stage()) mark("recv gradient", w, m, Peer::from, topo.rank_of(topo.pp_rank + 1, topo.dp_rank));
    wait_for_neighbour(w, m, "recv gradient", [&] {
      if (!topo.last_stage()) link.recv_gradient(flow);
      return !topo.last_stage();
    });
    if (w.inject_overflow && m == 0) {
      const float inf = std::numeric_limits<float>::infinity();
      be.upload(params.grads().data(), &inf, sizeof inf);
    }
    mark("backward", w, m);
    const auto t = Clock::now();
    if (last_of_step) {
      net.backward(flow, slot.states, [&](std::size_t i) {
        const ParamId first = net.param_range(i).first;
        optimizer.gradients_final_from(first < ParamId(params.params().size()) ? params.info(first).offset
                                                                               : params.total_size());
      });
    } else {
      net.backward(flow, slot.states);
    }
    w.timeline->span("backward", "backward", t, Clock::now(), w.step, m);
    if (!topo.first_stage()) {
      mark("send gradient", w, m, Peer::to, topo.rank_of(topo.pp_rank - 1, topo.dp_rank));
      const auto t_send = Clock::now();
      link.send_gradient(flow);
      w.timeline->span("send gradient", "send", t_send, Clock::now(), w.step, m);
    }
    slot.busy = false;
  }

  Slot& acquire() {
    for (auto& s : slots)
      if (!s->busy) {
        s->busy = true;
        return *s;
      }
    slots.push_back(std::make_unique<Slot>());
    slots.back()->states = net.make_states();
    slots.back()->busy = true;
    return *slots.back();
  }
  // Memory the slots hold for backward: what 1F1B keeps below GPipe.
  std::size_t activation_bytes() const {
    std::size_t bytes = 0;
    for (const auto& s : slots)
      for (const auto& st : s->states) bytes += st->bytes();
    return bytes;
  }
  double flow_bytes() const {
    double bytes = 0;
    for (const auto& s : slots) bytes += double(s->flow.x.bytes() + s->flow.dx.bytes());
    return bytes;
  }

  // What this stage reads of a micro-batch: the first stage its inputs (and, alone, the labels),
  // the last stage the labels, a middle stage nothing.
  bool reads() const { return topo.first_stage() || topo.last_stage(); }
  data::Fields fields() const { return topo.first_stage() ? data::Fields::all : data::Fields::labels; }

  // The replicas of a stage apply the same averaged gradients, so their weights must stay equal to
  // the bit; a difference would be a silent error (a non-deterministic all-reduce, a missed bucket).
  void check_replicas_agree(std::int64_t step) {
    if (topo.dp == 1) return;
    const auto [low, high] = optimizer.replica_range();
    require(low == high, "step " + std::to_string(step) + ": the data-parallel replicas of stage " +
                             std::to_string(topo.pp_rank) + " hold different weights (sum of squares from " +
                             std::to_string(low) + " to " + std::to_string(high) + ")");
  }

  // Once per step, every replica alike: the statistics the step's micro-batches gathered (BatchNorm's)
  // are added over the data-parallel group and folded into the running ones, so that these are the
  // same on every replica and in every layout of the same global batch.
  void end_step() {
    const int micro_batches = config.train.micro_batches * topo.dp;
    const auto combine = [&](float* x, std::size_t n) {
      if (topo.dp > 1) groups.data->all_reduce(x, n, DType::f32, parallel::ReduceOp::sum);
    };
    for (auto& layer : net.layers()) layer->end_step(be, combine, micro_batches);
  }

  struct Evaluation {
    double loss = 0, acc = 0;
    std::vector<std::int64_t> class_hits;  // per class: samples, right
  };

  // The validation samples: all of data.val_dir's set, or the split the sampler held out of data.dir.
  std::vector<std::int64_t> validation(const data::Sampler& sampler) const {
    if (!val_shards) return sampler.validation();
    std::vector<std::int64_t> all(std::size_t(val_shards->info().total_samples));
    std::iota(all.begin(), all.end(), std::int64_t{0});
    return all;
  }

  // "dog 0.950 (40), cat 0.900 (40), ...": accuracy and samples per class, by name where the set has them.
  nlohmann::json per_class(const Evaluation& e) const {
    const std::vector<std::string>& names = shards.info().class_names;
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t c = 0; 2 * c + 1 < e.class_hits.size(); ++c) {
      const std::int64_t n = e.class_hits[2 * c], right = e.class_hits[2 * c + 1];
      rows.push_back({{"class", c < names.size() ? names[c] : std::to_string(c)}, {"samples", n},
                      {"acc", n > 0 ? double(right) / double(n) : 0.0}});
    }
    return rows;
  }
  static std::string per_class_text(const nlohmann::json& rows) {
    std::ostringstream text;
    text << std::fixed << std::setprecision(3);
    for (const auto& r : rows)
      text << (text.tellp() > 0 ? ", " : "") << r["class"].get<std::string>() << " " << r["acc"].get<double>() << " ("
           << r["samples"].get<std::int64_t>() << ")";
    return text.str();
  }

  // Forward only, through the pipeline: replica r takes the validation micro-batches j with
  // j % dp == r; the last stages' sums are added over the world.
  Evaluation evaluate(data::Prefetcher& reader, const std::vector<std::int64_t>& val) {
    Evaluation e;
    if (val.empty()) return e;
    const std::size_t mb = std::size_t(config.train.micro_batch);
    std::vector<std::vector<std::int64_t>> mine;
    for (std::size_t j = 0, begin = 0; begin < val.size(); ++j, begin += mb)
      if (int(j % std::size_t(topo.dp)) == topo.dp_rank)
        mine.emplace_back(val.begin() + std::ptrdiff_t(begin), val.begin() + std::ptrdiff_t(std::min(val.size(), begin + mb)));
    // A few micro-batches are read ahead, never the whole split: memory stays bounded.
    const std::size_t ahead = std::size_t(std::max(1, config.data.prefetch_steps) * config.train.micro_batches);
    std::deque<std::future<data::MicroBatch>> pending;
    std::size_t next = 0;
    auto refill = [&] {
      if (!reads()) return;
      for (; next < mine.size() && pending.size() < ahead; ++next) pending.push_back(reader.submit(mine[next], fields()));
    };
    double sums[2] = {0, 0};  // loss x samples, correct
    std::vector<std::int64_t> hits(std::size_t(2 * shards.info().num_classes), 0);
    Slot& slot = acquire();
    Flow& flow = slot.flow;
    for (std::size_t j = 0; j < mine.size(); ++j) {
      refill();
      if (!topo.first_stage()) link.recv_activation(flow);
      if (reads()) {
        slot.batch = pending.front().get();
        pending.pop_front();
        flow.batch = &slot.batch;
      }
      flow.mode = Mode::eval;
      flow.act_stats = nullptr;
      flow.class_hits = &hits;
      net.forward(flow, slot.states);
      flow.class_hits = nullptr;
      if (topo.last_stage()) {
        sums[0] += flow.ce_loss * flow.B;
        sums[1] += flow.correct;
      } else {
        link.send_activation(flow);
      }
    }
    slot.busy = false;
    link.finish_sends();
    groups.world->all_reduce(sums, 2, parallel::ReduceOp::sum);
    std::vector<double> counts(hits.begin(), hits.end());  // exact below 2^53
    groups.world->all_reduce(counts.data(), counts.size(), parallel::ReduceOp::sum);
    e.class_hits.assign(counts.begin(), counts.end());
    e.loss = sums[0] / double(val.size());
    e.acc = sums[1] / double(val.size());
    return e;
  }

  // ------------------------------------------------------------------ the run and its phases

  // The state of a run beyond the model's tensors: where it is (the step, the LR schedule's
  // position, the loss scaler, AdamW), what it reads (the sampler, the feed), what it writes (traces,
  // timeline, checkpoints) and what it has measured. A checkpoint saves what a resume needs of it.
  struct Run {
    Run(Impl& d, const nlohmann::json& options)
        : sampler(d.make_sampler()), validation(d.validation(sampler)), scaler(d.config.precision, d.policy.compute()),
          checkpoints(d.config, d.topo, *d.groups.world), fingerprint(d.manifest.fingerprint(options)), record(d.config, d.topo),
          budget(d.config.train.max_minutes) {}
    data::Sampler sampler;
    std::vector<std::int64_t> validation;  // sample indices of the validation set (Impl::validation)
    std::unique_ptr<data::Prefetcher> val_reader;  // data.val_dir's reader, or null: the feed's reads them
    nlohmann::json per_class;  // the last evaluation's accuracy per class
    LossScaler scaler;
    Checkpointing checkpoints;
    const nlohmann::json fingerprint;
    std::int64_t first_step = 0;
    int applied_steps = 0;  // a skipped step does not advance the LR schedule
    RunRecord record;  // run.json, the traces, the log line; the step and evaluation times
    std::optional<Timeline> timeline;
    std::optional<BatchFeed> feed;
    TrainSummary summary;
    double mem_peak = 0;
    TimeBudget budget;  // train.max_minutes, a Slurm job's end
    double elapsed_before_s = 0;  // the run's training time before this start (from its checkpoint)
    Clock::time_point started;
    double elapsed_s() const { return elapsed_before_s + std::chrono::duration<double>(Clock::now() - started).count(); }
  };

  // What every rank agrees on once the schedule is done.
  struct Agreement {
    bool found_inf = false;             // some rank saw a non-finite gradient or loss: skip the step
    double grad_norm = 0, loss = 0;     // global, unscaled; the mean loss of the global batch
    double stage_sum_squares = 0;       // this stage's squared gradient norm, unscaled
    std::vector<LayerRow> layers;       // this stage's modules
    std::string stop;                   // why every rank stops after this step ("" : it does not)
    std::string time_note;              // rank 0, out of time: the account of the time at the decision
  };

  struct Update {
    bool applied = false;
    float lr = 0;
  };

  // A step's rows: the global one, and rank 0's view of every rank and every module.
  struct StepReport {
    StepRow row;
    std::vector<RankRow> ranks;
    std::vector<LayerRow> layers;
  };

  data::Sampler make_sampler() const {
    return data::Sampler(shards.info().total_samples, val_shards ? 0.0 : config.data.val_fraction, config.train.seed,
                         config.global_batch(topo.dp));
  }

  // A fresh start's --out (rank 0): --overwrite clears the run there (its checkpoints; the traces
  // are started anew); under --resume auto, traces of this same run (run.json's fingerprint) that
  // no checkpoint was committed for are a start killed early, which starts again. Any other traces
  // are another run's: refused (true).
  bool refuses_used_out(Run& run, std::ostream& log) {
    const std::string& out = config.train.out;
    if (config.overwrite) {
      const int removed = run.checkpoints.remove_all();
      if (removed > 0 || (!out.empty() && std::filesystem::exists(out + "/trace.csv")))
        log << "[rank 0] --overwrite: a fresh start; the traces in " << out << " and " << removed
            << " committed checkpoint(s) under " << run.checkpoints.dir() << " replaced\n";
      return false;
    }
    if (out.empty() || !std::filesystem::exists(out + "/trace.csv")) return false;
    if (config.resume != "auto") return true;
    nlohmann::json earlier;
    try {
      std::ifstream(out + "/run.json") >> earlier;
    } catch (const nlohmann::json::exception&) {
      return true;
    }
    if (!earlier.contains("fingerprint") || earlier["fingerprint"] != run.fingerprint) return true;
    log << "[rank 0] " << out << " holds this run's traces and no committed checkpoint: it starts again from step 0\n";
    return false;
  }

  // Start: a resume or a fresh start (never into the traces of another run), run.json and the
  // traces (rank 0), the timeline, the feed.
  void start(Run& run, const nlohmann::json& options, std::ostream& log) {
    const bool rank0 = topo.rank == 0;
    const std::optional<checkpoint::Counters> resumed =
        run.checkpoints.resume(be, optimizer, true, run.fingerprint, log);
    if (resumed) {
      run.first_step = resumed->next_step;
      run.applied_steps = int(resumed->applied_steps);
      run.scaler.restore(resumed->scaler);
      run.elapsed_before_s = resumed->elapsed_s;
    }
    run.checkpoints.reserve_memory(params);
    // Rank 0 looks, every rank learns the answer before rank 0 writes anything (a collective).
    double used_out = !resumed && rank0 && refuses_used_out(run, log);
    groups.world->all_reduce(&used_out, 1, parallel::ReduceOp::max);
    if (used_out > 0) {
      throw Error("--out " + config.train.out + " already holds the traces of " +
                  (config.resume == "none" ? std::string("a run")
                                           : std::string("another run (run.json) and no committed checkpoint to continue from")) +
                  ": --resume auto (the default) continues from its newest committed checkpoint, --resume PATH from "
                  "another, --overwrite starts afresh and replaces its traces and checkpoints");
    }
    if (!config.train.out.empty() && rank0) run.record.open(manifest.run_json(options, run.fingerprint, plan,
                                         {net.geometry(), run.sampler, run.validation.size(), optimizer.buckets(),
                                          run.scaler.describe()}),
                      resumed.has_value(), run.first_step);
    groups.world->barrier();
    run.timeline.emplace(!config.parallel.timeline.empty(), Clock::now(), topo.rank);
    run.started = Clock::now();
    const auto stall = parse_rank_step(config.debug.stall_reader, "debug.stall_reader");
    run.feed.emplace(shards, run.sampler, config, topo, reads(), fields(), run.first_step,
                     stall.first == topo.rank ? stall.second : -1);
    if (val_shards) run.val_reader = std::make_unique<data::Prefetcher>(*val_shards);
    run.summary.steps = int(run.first_step);
    log << std::fixed;
    if (!rank0) return;
    log << "[rank 0] " << topo.world << " rank(s): pp " << topo.pp << " x dp " << topo.dp << ", "
        << enum_name(schedule) << ", " << config.train.micro_batches << " micro-batch(es) of "
        << config.train.micro_batch << " per replica, global batch " << config.global_batch(topo.dp) << "\n";
    for (std::size_t s = 0; s < plan.stages.size(); ++s)
      log << "[rank 0]   stage " << s << ": " << plan.layers[plan.stages[s].first].name << " .. "
          << plan.layers[plan.stages[s].last - 1].name << "\n";
    if (amp())
      log << "[rank 0] precision " << dtype_name(policy.compute()) << ", loss scaling " << run.scaler.describe()
          << ", attention " << manifest.attention_path() << "\n";
    log << "[rank 0] parameter memory of rank " << topo.rank << ": " << optimizer.memory_description() << "\n";
    if (run.first_step >= config.train.steps)
      log << "[rank 0] the checkpoint is at step " << run.first_step << " of " << config.train.steps
          << ": nothing left to train\n";
  }

  // What the time left must cover (TimeBudget): the median of the last steps, the longest
  // evaluation, the longest checkpoint so far or an estimate before the first.
  TimeBudget::Margin time_margin(const Run& run) const {
    return {2 * run.record.recent_step_s(), run.record.longest_evaluation_s(), run.checkpoints.expected_seconds(params),
            5.0};
  }

  // Feed: the step's micro-batches (read ahead), the loss scale it runs with.
  void feed(Run& run, StepWork& w) {
    w.start = Clock::now();
    w.parts = run.feed->next(w.step);
    w.loss_scale = run.scaler.scale();
    w.grad_scale = float(w.loss_scale / config.train.micro_batches);  // the loss is scaled for every micro-batch
    w.slot_of.assign(std::size_t(config.train.micro_batches), nullptr);
    w.inject_overflow = inject_overflow.first == topo.rank && inject_overflow.second == w.step;
    w.timeline = &*run.timeline;
  }

  // Schedule: this stage's forwards and backwards in the schedule's order, the transfers between
  // stages, and the bucketed gradient all-reduce that overlaps the last backward.
  void run_schedule(StepWork& w) {
    w.bytes_before = groups.data->bytes_sent();
    optimizer.start_step();
    const auto t_schedule = Clock::now();
    for (const parallel::PipeAction& a : actions) {
      if (a.kind == parallel::PipeAction::forward)
        forward(w, a.micro_batch);
      else  // both schedules run the backwards in order
        backward(w, a.micro_batch, a.micro_batch == config.train.micro_batches - 1);
    }
    w.row.set("schedule_ms", ms_since(t_schedule));
    // Exposed communication: what is left of the gradient all-reduce once backward is done.
    const auto t_comm = Clock::now();
    optimizer.finish_reduce([&](std::size_t k) {
      watchdog.mark("all-reduce of gradient bucket " + std::to_string(k) + " of step " + std::to_string(w.step) + " (" +
                    data_group() + ")");
    });
    w.row.set("grad_bytes", double(groups.data->bytes_sent() - w.bytes_before));
    watchdog.mark("completing the sends of step " + std::to_string(w.step) + " to the neighbour stages");
    link.finish_sends();
    w.row.set("comm_ms", topo.world > 1 ? ms_since(t_comm) : 0.0);
    if (topo.dp > 1) w.timeline->span("gradient all-reduce (exposed)", "allreduce", t_comm, Clock::now(), w.step);
  }

  // Agree: found_inf, the global grad norm and the loss, the same on every rank (a non-finite
  // gradient in fp32 is an error naming its modules).
  Agreement agree(const Run& run, const StepWork& w) {
    watchdog.mark("the agreement on found_inf, grad norm and loss of step " + std::to_string(w.step) + " (" + all_ranks() + ")");
    Agreement a;
    a.layers = layer_statistics->rows(optimizer, w.acts, policy.compute(), w.loss_scale, a.stage_sum_squares);
    std::uint64_t nonfinite = 0;
    for (const LayerRow& r : a.layers) nonfinite += r.nonfinite;
    // found_inf: one flag per step, agreed (MAX) over every rank, so that every rank skips the same
    // steps and holds the same scale.
    // In the same reduction: a stop signal on any rank, and rank 0's view of the time budget.
    const bool late = topo.rank == 0 && run.budget.out_of_time(time_margin(run));  // rank 0's view
    if (late) a.time_note = run.budget.note(time_margin(run));
    double flags[4] = {(nonfinite > 0 || !w.loss_finite || !std::isfinite(a.stage_sum_squares)) ? 1.0 : 0.0,
                       nonfinite > 0 ? 1.0 : 0.0, double(stop_signal()), late ? 1.0 : 0.0};
    groups.world->all_reduce(flags, 4, parallel::ReduceOp::max);
    a.found_inf = flags[0] > 0;
    if (flags[2] > 0) a.stop = signal_name(int(flags[2]));
    else if (flags[3] > 0) a.stop = run.budget.source();
    // The global norm counts each parameter once: one replica per stage adds its stage's squares.
    double sums[2] = {topo.dp_rank == 0 ? a.stage_sum_squares : 0.0, topo.last_stage() ? w.local_loss / topo.dp : 0.0};
    groups.world->all_reduce(sums, 2, parallel::ReduceOp::sum);
    a.grad_norm = std::sqrt(sums[0]);
    a.loss = sums[1];
    if (a.found_inf && !amp()) {
      std::string where;
      for (const LayerRow& r : a.layers)
        if (r.nonfinite) where += (where.empty() ? "" : ", ") + r.layer;
      if (!where.empty()) throw Error("step " + std::to_string(w.step) + ": non-finite gradients in " + where);
      if (flags[1] > 0 || topo.rank != 0) throw ErrorElsewhere();
      throw Error("step " + std::to_string(w.step) + ": the gradient norm is not finite");
    }
    return a;
  }

  // Update: AdamW on the unscaled, clipped gradients (or a skipped step), then what every step ends
  // with: BatchNorm's statistics folded in, the gradients zeroed.
  Update update(Run& run, StepWork& w, const Agreement& a) {
    Update u;
    u.applied = run.scaler.update(a.found_inf, w.step);
    const auto t_opt = Clock::now();
    if (u.applied) {
      u.lr = learning_rate(config.optim, run.applied_steps++, config.train.steps);
      // Unscaled, clipped and updated in one pass, the working copies (under ZeRO, of this replica's
      // part) written in it.
      optimizer.step(u.lr, grad_factor(a.grad_norm, w.loss_scale, config.optim.clip_norm));
    }
    watchdog.mark("the BatchNorm statistics of step " + std::to_string(w.step) + " (" + data_group() + ")");
    end_step();
    // ZeRO: each replica updated its part; every part to every replica (after the BatchNorm
    // statistics, which each replica gathers from its own micro-batches until end_step has added them).
    if (optimizer.sharded() && u.applied) {
      watchdog.mark("the all-gather of the weights of step " + std::to_string(w.step) + " (" + data_group() + ")");
      const std::uint64_t before = groups.data->bytes_sent();
      optimizer.all_gather();
      w.row.add("grad_bytes", double(groups.data->bytes_sent() - before));
    }
    if (perturb_weights.first == topo.rank && perturb_weights.second == w.step) {
      float first = 0;
      be.download(&first, params.values().data(), sizeof first);
      first += 1e-3f;
      be.upload(params.values().data(), &first, sizeof first);
    }
    optimizer.zero_grads();
    w.row.set("optimizer_ms", ms_since(t_opt));
    w.timeline->span(u.applied ? "optimizer" : "optimizer (step skipped)", "optimizer", t_opt, Clock::now(), w.step);
    w.train_ms = ms_since(w.start);
    return u;
  }

  // Report: every rank's measurements and (one replica per stage) its modules, gathered on rank 0
  // into the step's rows.
  StepReport report(Run& run, const StepWork& w, Agreement& a, const Update& u) {
    RankRow mine = w.row;
    mine.set("step", double(w.step));
    mine.set("rank", topo.rank);
    mine.set("pp_rank", topo.pp_rank);
    mine.set("dp_rank", topo.dp_rank);
    if (topo.last_stage()) mine.set("local_loss", w.local_loss);
    mine.set("loss_scale", w.loss_scale);
    mine.set("grad_norm_local", std::sqrt(topo.dp > 1 ? optimizer.local_sum_squares() / (w.loss_scale * w.loss_scale)
                                                      : a.stage_sum_squares));
    mine.set("act_mb", double(w.act_bytes) / kMiB);
    mine.set("step_ms", w.train_ms);
    // An arena counts what the tensors really took; elsewhere the model's own tally is used.
    run.mem_peak = tensor_memory().peak_bytes()
                       ? double(tensor_memory().peak_bytes())
                       : std::max(run.mem_peak, optimizer.bytes() + double(w.act_bytes) +
                                                    double(net.workspace().bytes()) + flow_bytes());
    watchdog.mark("the report of step " + std::to_string(w.step) + " to rank 0 (" + all_ranks() + ")");
    RankReport mine_report{mine, {}};
    if (topo.dp_rank == 0) mine_report.layers = std::move(a.layers);  // one replica per stage reports its modules
    const std::vector<std::string> reports = groups.world->gather(encode_report(mine_report), 0);

    StepReport r;
    StepRow& row = r.row;
    row.set("step", double(w.step));
    row.set("epoch", run.sampler.epoch_of(w.step));
    row.set("loss", a.loss);
    row.set("grad_norm", a.grad_norm);
    row.set("loss_scale", w.loss_scale);
    row.set("skipped", u.applied ? 0 : 1);
    row.set("lr", u.lr);
    row.set("bubble_theory", bubble_theory);
    row.set("mem_peak_mb", run.mem_peak / kMiB);
    if (topo.rank == 0) {
      merge_reports(reports, topo.pp, row, r.ranks, r.layers);
      row.set("samples_per_s", config.global_batch(topo.dp) / (row["step_ms"] / 1000.0));
    }
    run.record.step_took(w.train_ms);
    update_watchdog(run.record, run.checkpoints.expected_seconds(params));
    return r;
  }

  bool last_step(std::int64_t step) const { return step + 1 == config.train.steps; }

  // Evaluate, every train.eval_interval steps and after the last: the replicas must still agree to
  // the bit, then the validation loss and accuracy.
  void evaluate_if_due(Run& run, StepReport& r) {
    const std::int64_t step = std::int64_t(r.row["step"]);
    if (!((config.train.eval_interval > 0 && (step + 1) % config.train.eval_interval == 0) || last_step(step))) return;
    watchdog.mark("the evaluation after step " + std::to_string(step) + " (" + all_ranks() + ")");
    const auto t_eval = Clock::now();
    check_replicas_agree(step);
    const Evaluation e = evaluate(run.val_reader ? *run.val_reader : run.feed->reader(), run.validation);
    run.timeline->span("evaluation", "eval", t_eval, Clock::now(), step);
    run.record.evaluation_took(std::chrono::duration<double>(Clock::now() - t_eval).count());
    if (run.validation.empty()) return;
    r.row.set("val_loss", run.summary.val_loss = e.loss);
    r.row.set("val_acc", run.summary.val_acc = e.acc);
    run.per_class = per_class(e);
  }

  // Record: the step's rows into the traces, its line into the log.
  void record(Run& run, const StepReport& r, std::ostream& log) {
    run.record.write(r.row, r.layers, r.ranks);
    run.summary.steps = int(r.row["step"]) + 1;
    run.summary.final_loss = r.row["loss"];
    const bool scaled = amp() && run.scaler.kind() != LossScaler::Kind::none;
    run.record.log_step(log, r.row, scaled ? run.scaler.skipped() : -1, run.elapsed_s());
  }

  // Checkpoint: the one in flight committed once written; a new one when due (written beside the
  // next steps), or when every rank stops after this step.
  void checkpoint_if_due(Run& run, std::int64_t step, const Agreement& agreed, std::ostream& log) {
    const std::string& stop = agreed.stop;
    watchdog.mark("the checkpoint after step " + std::to_string(step) + " (" + all_ranks() + ")");
    run.checkpoints.poll(log);
    if (!stop.empty()) {
      run.summary.stopped_early = stop;
      if (topo.rank == 0)
        log << "[rank 0] stopping after step " << step + 1 << " ("
            << (stop == run.budget.source() && !agreed.time_note.empty() ? stop + ": " + agreed.time_note : stop) << ")"
            << (run.checkpoints.dir().empty() ? ": no checkpoint (no --out or checkpoint.dir)" : ", with a checkpoint")
            << std::endl;
    }
    const bool final = last_step(step) || !stop.empty();
    if (!run.checkpoints.due(step, final)) return;
    run.summary.checkpointed = final;
    run.checkpoints.save(be, optimizer,
                         {step + 1, run.applied_steps, optimizer.adamw().updates(), run.scaler.state(), run.elapsed_s()},
                         run.fingerprint, log);
  }

  // Finish: the last checkpoint committed, the timeline written, the summary.
  TrainSummary finish(Run& run, std::ostream& log) {
    watchdog.mark("the last checkpoint's write and commit (" + all_ranks() + ")");
    run.checkpoints.finish(log);
    Timeline& timeline = *run.timeline;
    const std::vector<std::string> events =
        timeline.enabled() ? groups.world->gather(timeline.events_json(), 0) : std::vector<std::string>();
    if (topo.rank == 0 && timeline.enabled()) {
      std::vector<std::string> labels;
      for (int r = 0; r < topo.world; ++r)
        labels.push_back("rank " + std::to_string(r) + " (stage " + std::to_string(r / topo.dp) + ", replica " +
                         std::to_string(r % topo.dp) + ")");
      Timeline::write(config.parallel.timeline, events, labels);
      log << "[rank 0] timeline: " << config.parallel.timeline << " (chrome://tracing or ui.perfetto.dev)" << std::endl;
    }
    if (topo.rank == 0 && !run.per_class.empty())
      log << "[rank 0] val_acc by class: " << per_class_text(run.per_class) << std::endl;
    TrainSummary summary = run.summary;
    summary.step_ms = run.record.step_ms();
    summary.skipped = run.scaler.skipped();
    summary.median_step_ms = run.record.median_step_ms();
    return summary;
  }
};

Trainer::Trainer(const RunConfig& config, Backend& backend, data::ShardSet& shards, data::ShardSet* val_shards,
                 parallel::ProcessGroups& groups)
    : impl_(std::make_unique<Impl>(config, backend, shards, val_shards, groups)) {}

Trainer::~Trainer() = default;

// One step is eight phases, in this order on every rank; Impl holds each.
TrainSummary Trainer::run(const nlohmann::json& options, std::ostream& log) {
  Impl& d = *impl_;
  Impl::Run run(d, options);
  d.start(run, options, log);
  for (std::int64_t step = run.first_step; step < d.config.train.steps; ++step) {
    StepWork w(step);
    d.feed(run, w);                                        // this replica's micro-batches
    d.run_schedule(w);                                     // forwards, backwards, gradient all-reduce
    Impl::Agreement agreed = d.agree(run, w);              // found_inf, grad norm, loss, stop
    const Impl::Update update = d.update(run, w, agreed);  // AdamW or a skipped step
    Impl::StepReport report = d.report(run, w, agreed, update);  // every rank's rows to rank 0
    d.evaluate_if_due(run, report);                        // validation loss and accuracy
    d.record(run, report, log);                            // traces and the log line
    d.checkpoint_if_due(run, step, agreed, log);      // written beside the next steps
    if (!agreed.stop.empty()) break;                       // a signal or the time budget
  }
  return d.finish(run, log);
}

nlohmann::json Trainer::evaluate_checkpoint(const nlohmann::json& options, std::ostream& log) {
  Impl& d = *impl_;
  const RunConfig& c = d.config;
  require(c.resume != "none", "--eval-only needs a checkpoint: --resume auto (the newest committed one) or a directory");
  const data::Sampler sampler = d.make_sampler();
  const std::vector<std::int64_t> validation = d.validation(sampler);
  Checkpointing checkpoints(c, d.topo, *d.groups.world);
  const std::optional<checkpoint::Counters> loaded = checkpoints.resume(d.be, d.optimizer, false, d.manifest.fingerprint(options), log);
  require(loaded.has_value(), "--eval-only: no committed checkpoint under " +
                                  (checkpoints.dir().empty() ? std::string("(no --out or checkpoint.dir)") : checkpoints.dir()));
  require(!validation.empty(), "--eval-only: the validation split is empty (data.val_fraction)");
  data::Prefetcher reader(d.val_shards ? *d.val_shards : d.shards);
  const Impl::Evaluation e = d.evaluate(reader, validation);
  const std::string& which = checkpoints.loaded();
  const nlohmann::json per_class = d.per_class(e);
  nlohmann::json result = {{"checkpoint", which}, {"step", loaded->next_step}, {"val_loss", e.loss},
                           {"val_acc", e.acc}, {"val_samples", validation.size()},
                           {"val_set", c.data.val_dir.empty() ? c.data.dir : c.data.val_dir},
                           {"val_indices", validation},  // sample indices in val_set, for other tools
                           {"per_class", per_class}};
  if (d.topo.rank == 0) {
    log << "[rank 0] eval-only: " << which << " (after step " << loaded->next_step << "): val_loss "
        << std::setprecision(6) << e.loss << "  val_acc " << e.acc << " over " << validation.size()
        << " samples" << std::endl;
    log << "[rank 0] val_acc by class: " << Impl::per_class_text(per_class) << std::endl;
    if (!c.train.out.empty()) write_file_atomically(c.train.out + "/eval.json", result.dump(2) + "\n");
  }
  return result;
}

}  // namespace avtrain
