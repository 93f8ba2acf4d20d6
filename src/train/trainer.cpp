// The trainer's phases, one function each, and the loop that runs them (trainer.hpp says what each
// phase does and which file holds the pieces it calls). What happens inside a phase lives with the
// piece it belongs to: a phase reads as the order of its calls, what they measure and what every rank
// must agree on.
#include "train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/stop_signals.hpp"
#include "data/prefetcher.hpp"
#include "data/sampler.hpp"
#include "io/timeline.hpp"
#include "io/trace_writer.hpp"
#include "optim/distributed_optimizer.hpp"
#include "backend/update_gate.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "precision/loss_scaler.hpp"
#include "precision/precision_policy.hpp"
#include "train/batch_feed.hpp"
#include "train/checkpointing.hpp"
#include "train/debug_faults.hpp"
#include "train/eval_scores_file.hpp"
#include "train/evaluator.hpp"
#include "train/init_from.hpp"
#include "train/job_watchdog.hpp"
#include "train/layer_statistics.hpp"
#include "train/out_dir.hpp"
#include "train/rank_report.hpp"
#include "train/run_manifest.hpp"
#include "train/run_record.hpp"
#include "train/run_state.hpp"
#include "train/stage_plan.hpp"
#include "train/stage_runner.hpp"
#include "train/step_work.hpp"
#include "train/time_budget.hpp"

namespace avtrain {

namespace {
using Clock = StepWork::Clock;
double ms_since(Clock::time_point t0) { return StepWork::ms_since(t0); }

constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

struct Trainer::Impl {
  const RunConfig& config;
  Backend& be;
  data::ShardSet& shards;
  data::ShardSet* val_shards;  // data.val_dir, or null: the validation split is part of `shards`
  parallel::ProcessGroups& groups;
  const parallel::Topology& topo;
  PrecisionPolicy policy;
  data::Augmenter augmenter;  // [augment] and data.clip_seconds: the model's input shapes, the transforms
  StagePlan plan;
  DistributedOptimizer optimizer;  // the stage's parameters, their reduction, AdamW, the ZeRO parts
  ParamStore& params;
  JobWatchdog watchdog;  // what this rank is doing; ends a job that stops making progress
  StageRunner runner;    // this stage's layers, its micro-batches in flight, the transfers between stages
  RunManifest manifest;  // run.json's contents, the fingerprint
  DebugFaults faults;    // debug.*: the faults a test injects on purpose
  std::optional<LayerStatistics> layer_statistics;  // layers.csv's rows of this stage
  double bubble_theory;

  Impl(const RunConfig& c, Backend& b, data::ShardSet& s, data::ShardSet* v, parallel::ProcessGroups& g)
      : config(c), be(b), shards(s), val_shards(v), groups(g), topo(g.topology), policy(c.precision),
        augmenter(make_augmenter(c, s.info())), plan(plan_stages(c, b, augmenter.input(), g.topology.pp)), optimizer(b, distributed_optimizer_config(c)),
        params(optimizer.params()), watchdog(c, g),
        runner(c, b, g, policy, augmenter.input(), plan.stages[g.topology.pp_rank], optimizer, watchdog),
        manifest(c, g.topology, b, policy, s, v), faults(c.debug, g.topology.rank),
        bubble_theory(parallel::ideal_bubble(g.topology.pp, c.train.micro_batches)) {
    // Over the stage's dp x cp ranks: the cp ranks of a replica count as replicas for the optimizer.
    optimizer.build(topo.stage_size(), topo.stage_rank(), g.data.get());  // the runner's layers have registered the parameters
    layer_statistics.emplace(params);
  }

  bool amp() const { return policy.compute() != DType::f32; }

  // The replicas of a stage (and their context parts) apply the same averaged gradients, so their
  // weights must stay equal to the bit; a difference would be a silent error (a non-deterministic
  // all-reduce, a missed bucket).
  void check_replicas_agree(std::int64_t step) {
    if (topo.stage_size() == 1) return;
    const auto [low, high] = optimizer.replica_range();
    require(low == high, "step " + std::to_string(step) + ": the data-parallel replicas of stage " +
                             std::to_string(topo.pp_rank) + " hold different weights (sum of squares from " +
                             std::to_string(low) + " to " + std::to_string(high) + ")");
  }

  // ------------------------------------------------------------------ the run and its phases

  // The run's state beyond the stage's training state: sampler, evaluator, loss scaler,
  // checkpoints, record, time budget, feed.
  RunState new_run(const nlohmann::json& options) const {
    return RunState(config, topo, *groups.world, policy.compute(), shards, val_shards, manifest.fingerprint(options));
  }

  // What every rank agrees on once the schedule is done.
  struct Agreement {
    bool found_inf = false;             // some rank saw a non-finite gradient or loss: skip the step
    double grad_norm = 0, loss = 0;     // global, unscaled; the mean loss of the global batch
    double stage_sum_squares = 0;       // this stage's squared gradient norm, unscaled
    std::vector<LayerRow> layers;       // this stage's modules
    std::string stop;                   // why every rank stops after this step ("" : it does not)
    bool checkpoint_by_time = false;    // rank 0's checkpoint.minutes have passed since the last checkpoint
    std::string time_note;              // rank 0, out of time: the account of the time at the decision
    std::optional<Clock::time_point> update_issued;  // one rank: when the update went to the device, before this agreement
  };

  // What every rank agrees on after a step, in one MAX reduction: a flag each (a signal's number for
  // stop_signal), contiguous doubles so the struct is the reduction's buffer.
  struct AgreedFlags {
    double found_inf;            // a non-finite gradient, loss or sum of squares: skip the step
    double nonfinite_gradients;  // of those, non-finite gradients (named by module in fp32)
    double stop_signal;          // a stop signal's number on some rank
    double out_of_time;          // rank 0: the time budget leaves no room for another step
    double checkpoint_by_time;   // rank 0: checkpoint.minutes have passed since the last checkpoint
    static constexpr int kCount = 5;
  };
  static_assert(sizeof(AgreedFlags) == AgreedFlags::kCount * sizeof(double));

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

  // Start: a resume or a fresh start (never into the traces of another run), run.json and the
  // traces (rank 0), the timeline, the feed.
  void start(RunState& run, const nlohmann::json& options, std::ostream& log) {
    const std::optional<checkpoint::Counters> resumed =
        run.checkpoints.resume(be, optimizer, true, run.fingerprint, log, &runner.fp8());
    if (resumed) {
      run.first_step = resumed->next_step;
      run.applied_steps = int(resumed->applied_steps);
      run.scaler.restore(resumed->scaler);
      run.elapsed_before_s = resumed->elapsed_s;
    }
    run.checkpoints.reserve_memory(optimizer);
    claim_out_dir(config, topo, *groups.world, run.checkpoints, run.fingerprint, resumed.has_value(), log);
    if (!config.model.init_from.empty() && resumed && topo.rank == 0)
      log << "[rank 0] model.init_from " << config.model.init_from << ": not read (the run resumes from its checkpoint)\n";
    if (!config.model.init_from.empty() && !resumed)
      init_from_file(config, topo, *groups.world, be, optimizer, runner.net().geometry(), log);
    if (!config.train.out.empty() && topo.rank == 0) {
      const RunManifest::Measures measures{runner.net().geometry(), run.sampler, run.evaluator.samples().size(),
                                           optimizer.buckets(), run.scaler.describe()};
      run.record.open(manifest.run_json(options, run.fingerprint, plan, measures), resumed.has_value(), run.first_step);
    }
    groups.world->barrier();
    run.timeline.emplace(!config.parallel.timeline.empty(), Clock::now(), topo.rank);
    run.started = Clock::now();
    run.feed.emplace(shards, run.sampler, config, topo, runner.reads(), runner.fields(), run.first_step,
                     faults.stall_reader_at(), &augmenter);
    if (val_shards) run.val_reader = std::make_unique<data::Prefetcher>(*val_shards, config.data.reader_threads);
    run.summary.steps = int(run.first_step);
    log << std::fixed;
    if (topo.rank != 0) return;
    manifest.log_layout(log, plan, run.scaler.describe(), optimizer.memory_description());
    if (run.first_step >= config.train.steps)
      log << "[rank 0] the checkpoint is at step " << run.first_step << " of " << config.train.steps
          << ": nothing left to train\n";
  }

  // What the time left must cover (TimeBudget): the median of the last steps, the longest
  // evaluation, the longest checkpoint so far or an estimate before the first.
  TimeBudget::Margin time_margin(const RunState& run) const {
    return {2 * run.record.recent_step_s(), run.record.longest_evaluation_s(), run.checkpoints.expected_seconds(params),
            5.0};
  }

  // Feed: the step's micro-batches (read ahead), the loss scale it runs with.
  void feed(RunState& run, StepWork& w) {
    w.start = Clock::now();
    w.parts = run.feed->next(w.step);
    w.loss_scale = run.scaler.scale();
    w.grad_scale = float(w.loss_scale / config.train.micro_batches);  // the loss is scaled for every micro-batch
    w.inject_overflow = faults.overflows_at(w.step);
    if (const UlyssesExchange* x = runner.context()) {
      w.cp_bytes_before = x->bytes_sent();
      w.cp_seconds_before = x->seconds();
    }
    w.timeline = &*run.timeline;
  }

  // Schedule: this stage's forwards and backwards in the schedule's order, the transfers between
  // stages, and the bucketed gradient all-reduce that overlaps the last backward.
  void run_schedule(StepWork& w) {
    const std::uint64_t bytes_before = groups.data->bytes_sent();
    optimizer.start_step();
    runner.begin_fp8_step();
    const auto t_schedule = Clock::now();
    runner.run_actions(w);
    w.row.set("schedule_ms", ms_since(t_schedule));
    // Exposed communication: what is left of the gradient all-reduce once backward is done.
    const auto t_comm = Clock::now();
    optimizer.finish_reduce([&](std::size_t k) {
      watchdog.mark_data_group("all-reduce of gradient bucket " + std::to_string(k) + " of step " + std::to_string(w.step));
    });
    w.row.set("grad_bytes", double(groups.data->bytes_sent() - bytes_before));
    watchdog.mark("completing the sends of step " + std::to_string(w.step) + " to the neighbour stages");
    runner.finish_sends();
    w.row.set("comm_ms", topo.world > 1 ? ms_since(t_comm) : 0.0);
    if (topo.stage_size() > 1) w.timeline->span("gradient all-reduce (exposed)", "allreduce", t_comm, Clock::now(), w.step);
  }

  // One rank has no one to agree with: its update follows the gradient statistics on the device,
  // its gate (found_inf, the clip factor) decided there by the expression the host's agreement uses
  // (backend/update_gate.hpp), so nothing returns to the host between the last backward and the
  // update. Several ranks agree over MPI first and hand the update its gate.
  bool update_decided_on_device() const { return topo.world == 1; }

  // Agree: found_inf, the global grad norm and the loss, the same on every rank (a non-finite
  // gradient in fp32 is an error naming its modules).
  Agreement agree(const RunState& run, const StepWork& w) {
    watchdog.mark_all_ranks("the agreement on found_inf, grad norm and loss of step " + std::to_string(w.step));
    Agreement a;
    layer_statistics->start(optimizer, policy.compute());
    if (update_decided_on_device()) {
      a.update_issued = Clock::now();
      optimizer.step_as_decided_on_device(learning_rate(config.optim, run.applied_steps, config.train.steps),
                                          layer_statistics->update_rule(w.loss_scale, config.optim.clip_norm, w.loss_finite));
    }
    a.layers = layer_statistics->rows(optimizer, w.acts, w.loss_scale, a.stage_sum_squares);
    std::uint64_t nonfinite = 0;
    for (const LayerRow& r : a.layers) nonfinite += r.nonfinite;
    // found_inf: one flag per step, agreed (MAX) over every rank, so that every rank skips the same
    // steps and holds the same scale.
    // In the same reduction: a stop signal on any rank, and rank 0's view of the time budget.
    const bool late = topo.rank == 0 && run.budget.out_of_time(time_margin(run));  // rank 0's view
    if (late) a.time_note = run.budget.note(time_margin(run));
    // And rank 0's clock for checkpoints by wall time (checkpoint.minutes).
    AgreedFlags flags{(nonfinite > 0 || !w.loss_finite || !std::isfinite(a.stage_sum_squares)) ? 1.0 : 0.0,
                      nonfinite > 0 ? 1.0 : 0.0, double(stop_signal()), late ? 1.0 : 0.0,
                      topo.rank == 0 && run.checkpoints.minutes_passed() ? 1.0 : 0.0};
    groups.world->all_reduce(&flags.found_inf, AgreedFlags::kCount, parallel::ReduceOp::max);
    a.found_inf = flags.found_inf > 0;
    a.checkpoint_by_time = flags.checkpoint_by_time > 0;
    if (flags.stop_signal > 0) a.stop = signal_name(int(flags.stop_signal));
    else if (flags.out_of_time > 0) a.stop = run.budget.source();
    // The global norm counts each parameter once: one rank per stage adds its stage's squares. The
    // loss: the mean over the replicas of the last stage, whose cp ranks hold the same loss (part 0's).
    double sums[2] = {topo.stage_rank() == 0 ? a.stage_sum_squares : 0.0,
                      topo.last_stage() && topo.cp_rank == 0 ? w.local_loss / topo.dp : 0.0};
    groups.world->all_reduce(sums, 2, parallel::ReduceOp::sum);
    a.grad_norm = std::sqrt(sums[0]);
    a.loss = sums[1];
    if (a.found_inf && !amp()) {
      std::string where;
      for (const LayerRow& r : a.layers)
        if (r.nonfinite) where += (where.empty() ? "" : ", ") + r.layer;
      if (!where.empty()) throw Error("step " + std::to_string(w.step) + ": non-finite gradients in " + where);
      if (flags.nonfinite_gradients > 0 || topo.rank != 0) throw ErrorElsewhere();
      throw Error("step " + std::to_string(w.step) + ": the gradient norm is not finite");
    }
    return a;
  }

  // Update: AdamW on the unscaled, clipped gradients (or a skipped step), then what every step ends
  // with: BatchNorm's statistics folded in, the gradients zeroed.
  Update update(RunState& run, StepWork& w, const Agreement& a) {
    Update u;
    u.applied = run.scaler.update(a.found_inf, w.step);
    const auto t_opt = a.update_issued.value_or(Clock::now());
    if (u.applied) {
      u.lr = learning_rate(config.optim, run.applied_steps++, config.train.steps);
      // Unscaled, clipped and updated in one pass, the working copies (under ZeRO, of this replica's
      // part) written in it; on one rank already issued, its gate having found what found_inf says.
      if (a.update_issued) optimizer.took_step();
      else optimizer.step(u.lr, grad_factor(a.grad_norm, w.loss_scale, config.optim.clip_norm));
    }
    watchdog.mark_data_group("the BatchNorm statistics of step " + std::to_string(w.step));
    runner.fold_batch_statistics();
    // FP8: the step's amaxes over the replicas and the next step's scales (a skipped step's too, as
    // Transformer Engine's, whose amaxes are recorded in its forward and backward all the same).
    watchdog.mark_data_group("the FP8 amaxes of step " + std::to_string(w.step));
    runner.end_fp8_step();
    // ZeRO: each replica updated its part; every part to every replica (after the BatchNorm
    // statistics, which each replica gathers from its own micro-batches until they are added up).
    if (optimizer.sharded() && u.applied) {
      watchdog.mark_data_group("the all-gather of the weights of step " + std::to_string(w.step));
      const std::uint64_t before = groups.data->bytes_sent();
      optimizer.all_gather();
      w.row.add("grad_bytes", double(groups.data->bytes_sent() - before));
    }
    faults.perturb_if_due(be, params, w.step);
    optimizer.zero_grads();
    w.row.set("optimizer_ms", ms_since(t_opt));
    w.timeline->span(u.applied ? "optimizer" : "optimizer (step skipped)", "optimizer", t_opt, Clock::now(), w.step);
    w.train_ms = ms_since(w.start);
    return u;
  }

  // Report: every rank's measurements and (one replica per stage) its modules, gathered on rank 0
  // into the step's rows.
  StepReport report(RunState& run, const StepWork& w, Agreement& a, const Update& u) {
    RankRow mine = w.row;
    mine.set("step", double(w.step));
    mine.set("rank", topo.rank);
    mine.set("pp_rank", topo.pp_rank);
    mine.set("dp_rank", topo.dp_rank);
    mine.set("cp_rank", topo.cp_rank);
    if (topo.last_stage()) mine.set("local_loss", w.local_loss);
    mine.set("loss_scale", w.loss_scale);
    mine.set("grad_norm_local", std::sqrt(topo.stage_size() > 1
                                              ? optimizer.local_sum_squares() / (w.loss_scale * w.loss_scale)
                                              : a.stage_sum_squares));
    mine.set("act_mb", double(w.act_bytes) / kMiB);
    const UlyssesExchange* x = runner.context();
    mine.set("cp_bytes", x ? double(x->bytes_sent() - w.cp_bytes_before) : 0.0);
    mine.set("cp_ms", x ? 1e3 * (x->seconds() - w.cp_seconds_before) : 0.0);
    mine.set("step_ms", w.train_ms);
    // An arena counts what the tensors really took; elsewhere the model's own tally is used.
    run.mem_peak = tensor_memory().peak_bytes()
                       ? double(tensor_memory().peak_bytes())
                       : std::max(run.mem_peak, optimizer.bytes() + double(w.act_bytes) +
                                                    double(runner.net().workspace().bytes()) + runner.flow_bytes());
    watchdog.mark_all_ranks("the report of step " + std::to_string(w.step) + " to rank 0");
    RankReport mine_report{mine, {}};
    // One rank per stage reports its modules (the FP8 statistics are the whole group's: reduced).
    if (topo.stage_rank() == 0) {
      LayerStatistics::add_fp8(a.layers, runner.fp8());
      mine_report.layers = std::move(a.layers);
    }
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
    watchdog.adapt_timeout(run.record, run.checkpoints.expected_seconds(params));
    return r;
  }

  bool last_step(std::int64_t step) const { return step + 1 == config.train.steps; }

  // Evaluate, every train.eval_interval steps and after the last: the replicas must still agree to
  // the bit, then the validation loss and accuracy.
  void evaluate_if_due(RunState& run, StepReport& r) {
    const std::int64_t step = std::int64_t(r.row["step"]);
    if (!((config.train.eval_interval > 0 && (step + 1) % config.train.eval_interval == 0) || last_step(step))) return;
    watchdog.mark_all_ranks("the evaluation after step " + std::to_string(step));
    const auto t_eval = Clock::now();
    check_replicas_agree(step);
    const Evaluator::Result e = run.evaluator.evaluate(runner, run.val_reader ? *run.val_reader : run.feed->reader(),
                                                               &augmenter);
    run.timeline->span("evaluation", "eval", t_eval, Clock::now(), step);
    run.record.evaluation_took(std::chrono::duration<double>(Clock::now() - t_eval).count());
    if (run.evaluator.samples().empty()) return;
    r.row.set("val_loss", run.summary.val_loss = e.loss);
    r.row.set("val_acc", run.summary.val_acc = e.acc);
    r.row.set("val_top5", e.metrics.top5);
    r.row.set("val_map", e.metrics.map);
    r.row.set("val_auc", e.metrics.auc);
    r.row.set("val_dprime", e.metrics.dprime);
    run.per_class = e.per_class;
  }

  // Record: the step's rows into the traces, its line into the log.
  void record(RunState& run, const StepReport& r, std::ostream& log) {
    run.record.write(r.row, r.layers, r.ranks);
    run.summary.steps = int(r.row["step"]) + 1;
    run.summary.final_loss = r.row["loss"];
    const bool scaled = amp() && run.scaler.kind() != LossScaler::Kind::none;
    run.record.log_step(log, r.row, scaled ? run.scaler.skipped() : -1, run.elapsed_s());
  }

  // Checkpoint: the one in flight committed once written; a new one when due (written beside the
  // next steps), or when every rank stops after this step.
  void checkpoint_if_due(RunState& run, std::int64_t step, const Agreement& agreed, std::ostream& log) {
    const std::string& stop = agreed.stop;
    watchdog.mark_all_ranks("the checkpoint after step " + std::to_string(step));
    run.checkpoints.poll(log);
    if (!stop.empty()) {
      run.summary.stopped_early = stop;
      if (topo.rank == 0)
        log << "[rank 0] stopping after step " << step + 1 << " ("
            << (stop == run.budget.source() && !agreed.time_note.empty() ? stop + ": " + agreed.time_note : stop) << ")"
            << (run.checkpoints.writes() ? ", with a checkpoint" : ": no checkpoint (" + run.checkpoints.why_none() + ")")
            << std::endl;
    }
    const bool final = last_step(step) || !stop.empty();
    if (!run.checkpoints.due(step, final, agreed.checkpoint_by_time)) return;
    run.summary.checkpointed = final;
    checkpoint::Counters counters{step + 1, run.applied_steps, optimizer.adamw().updates(), run.scaler.state(),
                                  run.elapsed_s(), {}};
    const Fp8Linears& fp8 = runner.fp8();
    for (std::size_t i = 0; i < fp8.scalings().size(); ++i) counters.fp8.emplace_back(fp8.modules()[i], fp8.state(i));
    run.checkpoints.save(be, optimizer, counters, run.fingerprint, log);
  }

  // Finish: the last checkpoint committed, the timeline written, the summary.
  TrainSummary finish(RunState& run, std::ostream& log) {
    watchdog.mark_all_ranks("the last checkpoint's write and commit");
    run.checkpoints.finish(log);
    Timeline& timeline = *run.timeline;
    const std::vector<std::string> events =
        timeline.enabled() ? groups.world->gather(timeline.events_json(), 0) : std::vector<std::string>();
    if (topo.rank == 0 && timeline.enabled()) {
      std::vector<std::string> labels;
      for (int r = 0; r < topo.world; ++r) {
        const parallel::Topology at = topo.at(r);
        labels.push_back("rank " + std::to_string(r) + " (stage " + std::to_string(at.pp_rank) + ", replica " +
                         std::to_string(at.dp_rank) + (topo.cp > 1 ? ", part " + std::to_string(at.cp_rank) : "") +
                         ")");
      }
      Timeline::write(config.parallel.timeline, events, labels);
      log << "[rank 0] timeline: " << config.parallel.timeline << " (chrome://tracing or ui.perfetto.dev)" << std::endl;
    }
    if (topo.rank == 0 && !run.per_class.empty())
      log << "[rank 0] " << (config.model.task == Task::multi_label ? "AP" : "val_acc")
          << " by class: " << Evaluator::per_class_text(run.per_class) << std::endl;
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
  RunState run = d.new_run(options);
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
  const data::Sampler sampler = RunState::make_sampler(c, d.topo, d.shards, d.val_shards != nullptr);
  const Evaluator evaluator(c, d.topo, *d.groups.world, d.shards, d.val_shards, sampler);
  const std::vector<std::int64_t>& validation = evaluator.samples();
  Checkpointing checkpoints(c, d.topo, *d.groups.world);
  const std::optional<checkpoint::Counters> loaded = checkpoints.resume(d.be, d.optimizer, false, d.manifest.fingerprint(options), log,
                                                                     &d.runner.fp8());
  require(loaded.has_value(), "--eval-only: no committed checkpoint under " +
                                  (checkpoints.dir().empty() ? std::string("(no --out or checkpoint.dir)") : checkpoints.dir()));
  require(!validation.empty(), "--eval-only: the validation split is empty (data.val_fraction)");
  data::Prefetcher reader(d.val_shards ? *d.val_shards : d.shards, c.data.reader_threads);
  const Evaluator::Result e = evaluator.evaluate(d.runner, reader, &d.augmenter);
  const std::string& which = checkpoints.loaded();
  const nlohmann::json& per_class = e.per_class;
  const auto number = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json result = {{"checkpoint", which}, {"step", loaded->next_step}, {"task", enum_name(c.model.task)},
                           {"val_loss", e.loss}, {"val_acc", e.acc}, {"val_top5", e.metrics.top5},
                           {"val_map", number(e.metrics.map)}, {"val_auc", number(e.metrics.auc)},
                           {"val_dprime", number(e.metrics.dprime)}, {"val_samples", validation.size()},
                           {"val_set", c.data.val_dir.empty() ? c.data.dir : c.data.val_dir},
                           {"val_indices", validation},  // sample indices in val_set, for other tools
                           {"per_class", per_class}};
  if (d.topo.rank == 0) {
    log << "[rank 0] eval-only: " << which << " (after step " << loaded->next_step << "): val_loss "
        << std::setprecision(6) << e.loss << "  val_acc " << e.acc << "  top-5 " << e.metrics.top5 << "  mAP "
        << e.metrics.map << "  AUC " << e.metrics.auc << "  d' " << e.metrics.dprime << " over " << validation.size()
        << " samples" << std::endl;
    log << "[rank 0] " << (c.model.task == Task::multi_label ? "AP" : "val_acc")
        << " by class: " << Evaluator::per_class_text(per_class) << std::endl;
    if (!c.train.out.empty()) {
      std::error_code made;  // an --out that does not exist yet is made, as a training run makes it
      std::filesystem::create_directories(c.train.out, made);
      require(!made, c.train.out + ": cannot make the folder for eval.json: " + made.message());
      write_eval_scores(c.train.out + "/eval_scores.h5", validation, e.logits, e.targets,
                        (d.val_shards ? *d.val_shards : d.shards).info().num_classes,
                        (d.val_shards ? *d.val_shards : d.shards).info().class_names);
      write_file_atomically(c.train.out + "/eval.json", result.dump(2) + "\n");
    }
  }
  return result;
}

}  // namespace avtrain
