#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iomanip>
#include <limits>
#include <sstream>

#include "core/error.hpp"
#include "data/prefetcher.hpp"
#include "data/sampler.hpp"
#include "io/timeline.hpp"
#include "io/trace_writer.hpp"
#include "model/av_net.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_clip.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "precision/loss_scaler.hpp"
#include "precision/precision_policy.hpp"
#include "train/checkpointing.hpp"
#include "train/rank_report.hpp"
#include "train/stage_link.hpp"
#include "train/stage_plan.hpp"

namespace avtrain {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

constexpr double kMiB = 1024.0 * 1024.0;

// Below this |g| a gradient value is not held at full precision by the compute type: its smallest
// normal. An fp32 run reports against fp16's, what an fp16 run of it would lose.
float underflow_threshold(DType compute) { return compute == DType::bf16 ? 0x1p-126f : 0x1p-14f; }

// Parameters grouped by module, in registration order: the rows of layers.csv.
struct ModuleGroup {
  std::string name;
  std::vector<ParamId> params;
};

std::vector<ModuleGroup> group_modules(const ParamStore& params) {
  std::vector<ModuleGroup> groups;
  for (ParamId id = 0; id < ParamId(params.params().size()); ++id) {
    const ParamInfo& p = params.info(id);
    if (!p.trainable) continue;
    if (groups.empty() || groups.back().name != p.module) groups.push_back({p.module, {}});
    groups.back().params.push_back(id);
  }
  return groups;
}

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

// What one step's forwards and backwards read and add to.
struct StepWork {
  std::int64_t step = 0;
  std::vector<std::future<data::MicroBatch>>* parts = nullptr;  // this replica's micro-batches (stages that read)
  float grad_scale = 1;
  bool inject_overflow = false;
  Timeline* timeline = nullptr;
  std::vector<Slot*> slot_of;  // micro-batch -> its slot while in flight
  ActivationStats acts;
  double local_loss = 0, data_wait_ms = 0, idle_ms = 0;
  bool loss_finite = true;
  std::size_t act_bytes = 0;
};
}  // namespace

struct Trainer::Impl {
  const RunConfig& config;
  Backend& be;
  data::ShardSet& shards;
  parallel::ProcessGroups& groups;
  const parallel::Topology& topo;
  PrecisionPolicy policy;
  StagePlan plan;
  parallel::StageRange stage;
  ParamStore params;
  AVNet net;
  std::vector<ModuleGroup> modules;
  std::vector<std::unique_ptr<Slot>> slots;
  StageLink link;
  parallel::GradBuckets buckets;
  parallel::Schedule schedule;
  std::pair<int, std::int64_t> inject_overflow, perturb_weights;

  Impl(const RunConfig& c, Backend& b, data::ShardSet& s, parallel::ProcessGroups& g)
      : config(c), be(b), shards(s), groups(g), topo(g.topology), policy(c.precision),
        plan(plan_stages(c, b, s.info(), g.topology.pp)), stage(plan.stages[g.topology.pp_rank]),
        net(b, params, c.model, s.info(), policy, LayerRange{stage.first, stage.last}),
        link(*g.pipeline, g.gradient_pipeline(), b, c.model.width),
        buckets(b, allocate_params(), param_bounds(), c.parallel.grad_bucket_mb,
                parse_dtype(c.parallel.grad_comm_dtype, "parallel.grad_comm_dtype"), *g.data),
        schedule(parallel::parse_schedule(c.parallel.schedule)),
        inject_overflow(parse_rank_step(c.debug.inject_overflow, "debug.inject_overflow")),
        perturb_weights(parse_rank_step(c.debug.perturb_weights, "debug.perturb_weights")) {
    modules = group_modules(params);
  }

  // Initialises this stage's parameters from (seed, name); returns the gradient buffer, which must
  // exist before the buckets (the next member) point into it.
  float* allocate_params() {
    params.allocate(config.train.seed, config.train.init_ulps);
    params.refresh_working(be);
    return params.grads().data();
  }
  std::vector<std::size_t> param_bounds() const {
    std::vector<std::size_t> bounds;
    for (const ParamInfo& p : params.params()) bounds.push_back(p.offset);
    bounds.push_back(params.total_size());
    return bounds;
  }

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
    w.idle_ms += ms_since(t);
    w.timeline->span(receives ? what : "complete sends", "recv", t, Clock::now(), w.step, m);
  }

  void forward(StepWork& w, int m) {
    Slot& slot = acquire();
    w.slot_of[m] = &slot;
    Flow& flow = slot.flow;
    wait_for_neighbour(w, m, "recv activation", [&] {
      if (!topo.first_stage()) link.recv_activation(flow);
      return !topo.first_stage();
    });
    if (reads()) {
      const auto t = Clock::now();
      slot.batch = (*w.parts)[m].get();
      w.data_wait_ms += ms_since(t);
      flow.batch = &slot.batch;
    }
    flow.mode = Mode::train;
    flow.step = w.step;
    flow.detect_anomaly = config.precision.detect_anomaly;
    flow.grad_scale = w.grad_scale;
    flow.act_stats = &w.acts;
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
      const auto t_send = Clock::now();
      link.send_activation(flow);
      w.timeline->span("send activation", "send", t_send, Clock::now(), w.step, m);
    }
  }

  // The last micro-batch's backward launches each gradient bucket as soon as its layers are done.
  void backward(StepWork& w, int m, bool last_of_step) {
    Slot& slot = *w.slot_of[m];
    Flow& flow = slot.flow;
    wait_for_neighbour(w, m, "recv gradient", [&] {
      if (!topo.last_stage()) link.recv_gradient(flow);
      return !topo.last_stage();
    });
    if (w.inject_overflow && m == 0) {
      const float inf = std::numeric_limits<float>::infinity();
      be.upload(params.grads().data(), &inf, sizeof inf);
    }
    const auto t = Clock::now();
    if (last_of_step) {
      net.backward(flow, slot.states, [&](std::size_t i) {
        const ParamId first = net.param_range(i).first;
        buckets.ready_from(first < ParamId(params.params().size()) ? params.info(first).offset : params.total_size());
        buckets.progress();
      });
    } else {
      net.backward(flow, slot.states);
    }
    w.timeline->span("backward", "backward", t, Clock::now(), w.step, m);
    if (!topo.first_stage()) {
      const auto t_send = Clock::now();
      link.send_gradient(flow);
      w.timeline->span("send gradient", "send", t_send, Clock::now(), w.step, m);
    }
    slot.busy = false;
  }

  // Parameters, main grads, AdamW moments (4 bytes each) and the working copies.
  double parameter_bytes() const { return 16.0 * double(params.total_size()) + double(params.working_bytes()); }

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

  // One row per module of this stage, from the gradients as accumulated (multiplied by loss_scale):
  // norms are reported unscaled, the underflow share as the compute type sees the scaled values.
  // `grad_sum_squares` gets the unscaled sum of squares over the stage.
  // Backend::tensor_stats of every parameter's part of `flat` (values or grads), by ParamId, in one
  // pass and one return to the host (on a GPU: one wait for the device, not one per parameter).
  std::vector<Backend::TensorStats> param_stats(const Buffer& flat, float threshold) {
    std::vector<Backend::Span> spans;
    for (const ParamInfo& p : params.params()) spans.push_back({p.offset, p.size});
    std::vector<Backend::TensorStats> stats(spans.size());
    be.tensor_stats_many(flat.data(), spans.data(), int(spans.size()), threshold, stats.data());
    return stats;
  }

  std::vector<LayerRow> layer_rows(const ActivationStats& acts, double loss_scale, double& grad_sum_squares) {
    std::vector<LayerRow> rows;
    grad_sum_squares = 0;
    const float threshold = underflow_threshold(policy.compute());
    const double unscale2 = 1.0 / (loss_scale * loss_scale);
    const std::vector<Backend::TensorStats> grad_stats = param_stats(params.grads(), threshold);
    const std::vector<Backend::TensorStats> value_stats = param_stats(params.values(), 0.0f);
    const std::map<std::string, float> absmax = acts.read();
    for (const ModuleGroup& g : modules) {
      LayerRow r;
      r.layer = g.name;
      double gsq = 0, psq = 0;
      std::size_t underflow = 0, size = 0;
      for (ParamId id : g.params) {
        const ParamInfo& p = params.info(id);
        const Backend::TensorStats& s = grad_stats[std::size_t(id)];
        gsq += s.sum_squares * unscale2;
        underflow += (p.size - s.nonzero) + s.below;  // zeros included: a flushed value is the extreme case
        size += p.size;
        r.nonfinite += s.nonfinite;
        psq += value_stats[std::size_t(id)].sum_squares;
      }
      grad_sum_squares += gsq;
      r.grad_norm = std::sqrt(gsq);
      r.param_norm = std::sqrt(psq);
      r.grad_underflow_frac = size ? double(underflow) / double(size) : 0.0;
      if (auto it = absmax.find(g.name); it != absmax.end()) r.act_absmax = it->second;
      rows.push_back(std::move(r));
    }
    return rows;
  }

  // What this stage reads of a micro-batch: the first stage its inputs (and, alone, the labels),
  // the last stage the labels, a middle stage nothing.
  bool reads() const { return topo.first_stage() || topo.last_stage(); }
  data::Fields fields() const { return topo.first_stage() ? data::Fields::all : data::Fields::labels; }

  // The replicas of a stage apply the same averaged gradients, so their weights must stay equal to
  // the bit; a difference would be a silent error (a non-deterministic all-reduce, a missed bucket).
  void check_replicas_agree(std::int64_t step) {
    if (topo.dp == 1) return;
    const std::vector<Backend::TensorStats> stats = param_stats(params.values(), 0.0f);
    double sum = 0;
    for (ParamId id = 0; id < ParamId(stats.size()); ++id)
      if (params.info(id).trainable) sum += stats[std::size_t(id)].sum_squares;
    double stage_range[2] = {sum, -sum};  // max and -min over the replicas
    groups.data->all_reduce(stage_range, 2, parallel::ReduceOp::max);
    require(stage_range[0] == -stage_range[1],
            "step " + std::to_string(step) + ": the data-parallel replicas of stage " + std::to_string(topo.pp_rank) +
                " hold different weights (sum of squares from " + std::to_string(-stage_range[1]) + " to " +
                std::to_string(stage_range[0]) + ")");
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

  // What a resumed run must match: the model, the data, the global batch, the seed, the precision.
  nlohmann::json fingerprint(const nlohmann::json& manifest) const {
    nlohmann::json f = {{"format_version", checkpoint::kFormatVersion},
                        {"global_batch", config.global_batch(topo.dp)},
                        {"seed", config.train.seed},
                        {"precision", dtype_name(policy.compute())}};
    f["model"] = nlohmann::json::object();
    for (auto it = manifest["config"].begin(); it != manifest["config"].end(); ++it)
      if (it.key().rfind("model.", 0) == 0) f["model"][it.key().substr(6)] = *it;
    f["data"] = manifest["data"];
    f["data"].erase("dir");
    return f;
  }

  struct Evaluation {
    double loss = 0, acc = 0;
  };

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
      net.forward(flow, slot.states);
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
    e.loss = sums[0] / double(val.size());
    e.acc = sums[1] / double(val.size());
    return e;
  }

  void add_layout(nlohmann::json& manifest) const {
    nlohmann::json stages = nlohmann::json::array();
    for (std::size_t s = 0; s < plan.stages.size(); ++s) {
      nlohmann::json names = nlohmann::json::array();
      std::size_t count = 0;
      for (int i = plan.stages[s].first; i < plan.stages[s].last; ++i) {
        names.push_back(plan.layers[i].name);
        count += plan.layers[i].params;
      }
      stages.push_back({{"stage", s}, {"layers", names}, {"parameters", count}});
    }
    nlohmann::json& l = manifest["layout"];
    l["world_size"] = topo.world;
    l["pp"] = topo.pp;
    l["dp"] = topo.dp;
    l["schedule"] = parallel::schedule_name(schedule);
    l["stages"] = stages;
    l["micro_batch"] = config.train.micro_batch;
    l["micro_batches"] = config.train.micro_batches;
    l["global_batch"] = config.global_batch(topo.dp);
    l["grad_comm_dtype"] = config.parallel.grad_comm_dtype;
    l["grad_bucket_mb"] = config.parallel.grad_bucket_mb;
    l["grad_buckets"] = buckets.count();
  }
};

Trainer::Trainer(const RunConfig& config, Backend& backend, data::ShardSet& shards, parallel::ProcessGroups& groups)
    : impl_(std::make_unique<Impl>(config, backend, shards, groups)) {}

Trainer::~Trainer() = default;

TrainSummary Trainer::run(nlohmann::json manifest, std::ostream& log) {
  Impl& d = *impl_;
  const RunConfig& c = d.config;
  const parallel::Topology& topo = d.topo;
  parallel::Communicator& world = *d.groups.world;
  const int M = c.train.micro_batches, mb = c.train.micro_batch;
  const bool rank0 = topo.rank == 0;
  data::Sampler sampler(d.shards.info().total_samples, c.data.val_fraction, c.train.seed, c.global_batch(topo.dp));
  AdamW optimizer(d.be, d.params, c.optim);
  LossScaler scaler(c.precision, d.policy.compute());
  const bool amp = d.policy.compute() != DType::f32;
  const std::vector<parallel::PipeAction> actions = parallel::pipeline_actions(d.schedule, topo.pp, topo.pp_rank, M);
  const double bubble_theory = parallel::ideal_bubble(topo.pp, M);

  const nlohmann::json fingerprint = d.fingerprint(manifest);
  Checkpointing checkpoints(c, topo, world);
  const std::optional<checkpoint::Counters> resumed = checkpoints.resume(d.be, d.params, &optimizer, fingerprint, log);
  std::int64_t first_step = 0;
  int schedule_step = 0;  // steps applied: a skipped step does not advance the schedule
  if (resumed) {
    first_step = resumed->next_step;
    schedule_step = int(resumed->applied_steps);
    scaler.restore(resumed->scaler);
    d.params.refresh_working(d.be);
  }
  checkpoints.reserve_memory(d.params);
  // Rank 0 looks, every rank learns the answer before rank 0 writes anything (a collective).
  double used_out = !resumed && rank0 && !c.train.out.empty() && !c.overwrite &&
                    std::filesystem::exists(c.train.out + "/trace.csv");
  world.all_reduce(&used_out, 1, parallel::ReduceOp::max);
  if (used_out > 0) {
    throw Error("--out " + c.train.out + " already holds the traces of a run" +
                (c.resume == "none" ? std::string() : std::string(" and no committed checkpoint to continue from")) +
                ": --resume auto (the default) continues from its newest committed checkpoint, --resume PATH from "
                "another, --overwrite starts afresh and replaces the traces");
  }

  std::unique_ptr<TraceWriter> traces;
  if (!c.train.out.empty() && rank0) {
    nlohmann::json starts = nlohmann::json::array();
    if (resumed) {
      std::ifstream previous(c.train.out + "/run.json");
      try {
        nlohmann::json old;
        if (previous >> old; old.contains("starts")) starts = old["starts"];
      } catch (const nlohmann::json::exception&) {
      }
    }
    starts.push_back({{"time", std::time(nullptr)}, {"step", first_step}, {"ranks", topo.world},
                      {"pp", topo.pp}, {"dp", topo.dp}});
    manifest["starts"] = starts;
    traces = std::make_unique<TraceWriter>(c.train.out, resumed ? first_step : -1);
    std::size_t parameters = 0;
    double forward_flops = 0;  // matrix-product FLOPs of one micro-batch through the whole net
    for (const auto& l : d.plan.layers) parameters += l.params, forward_flops += l.flops;
    manifest["model"]["parameters"] = parameters;
    // Backward takes twice the forward's products: what model FLOP utilisation counts per step.
    manifest["model"]["train_flops_per_step"] = 3.0 * forward_flops * M * topo.dp;
    manifest["model"]["tokens"] = d.net.geometry().tokens;
    manifest["model"]["audio_tokens"] = d.net.geometry().audio_tokens;
    manifest["model"]["video_tokens"] = d.net.geometry().video_tokens;
    manifest["data"]["train_samples"] = sampler.train_size();
    manifest["data"]["val_samples"] = sampler.validation().size();
    manifest["data"]["steps_per_epoch"] = sampler.steps_per_epoch();
    d.add_layout(manifest);
    nlohmann::json fp32_modules = nlohmann::json::array();
    if (amp)
      for (const std::string& module : d.plan.modules)
        if (d.policy.of(module) == DType::f32) fp32_modules.push_back(module);
    manifest["precision"] = {{"mode", dtype_name(d.policy.compute())},
                             {"products", d.be.gemm_engine(d.policy.compute())},
                             {"loss_scaling", scaler.describe()},
                             {"fp32_modules", fp32_modules}};
    write_file_atomically(c.train.out + "/run.json", manifest.dump(2) + "\n");
  }

  world.barrier();
  Timeline timeline(!c.parallel.timeline.empty(), Clock::now(), topo.rank);

  // This replica's micro-batch m of a step: samples [(dp_rank M + m) mb, +mb) of the global batch,
  // so a micro-batch holds the same samples in every layout.
  data::Prefetcher reader(d.shards);
  std::deque<std::vector<std::future<data::MicroBatch>>> ahead;
  std::int64_t next_to_submit = first_step;
  auto submit_until = [&](std::int64_t last) {
    for (; next_to_submit <= last && next_to_submit < c.train.steps; ++next_to_submit) {
      std::vector<std::future<data::MicroBatch>> parts;
      if (d.reads()) {
        const std::vector<std::int64_t> global = sampler.batch(next_to_submit);
        for (int m = 0; m < M; ++m) {
          const auto begin = global.begin() + (std::int64_t(topo.dp_rank) * M + m) * mb;
          parts.push_back(reader.submit({begin, begin + mb}, d.fields()));
        }
      }
      ahead.push_back(std::move(parts));
    }
  };

  TrainSummary summary;
  summary.steps = int(first_step);
  std::vector<double> step_times;
  double mem_peak = 0;
  if (rank0) {
    log << "[rank 0] " << topo.world << " rank(s): pp " << topo.pp << " x dp " << topo.dp << ", "
        << parallel::schedule_name(d.schedule) << ", " << M << " micro-batch(es) of " << mb << " per replica, global batch "
        << c.global_batch(topo.dp) << "\n";
    for (std::size_t s = 0; s < d.plan.stages.size(); ++s)
      log << "[rank 0]   stage " << s << ": " << d.plan.layers[d.plan.stages[s].first].name << " .. "
          << d.plan.layers[d.plan.stages[s].last - 1].name << "\n";
    if (amp) log << "[rank 0] precision " << dtype_name(d.policy.compute()) << ", loss scaling " << scaler.describe() << "\n";
  }
  log << std::fixed;
  if (rank0 && first_step >= c.train.steps)
    log << "[rank 0] the checkpoint is at step " << first_step << " of " << c.train.steps << ": nothing left to train\n";
  for (std::int64_t step = first_step; step < c.train.steps; ++step) {
    const auto t_step = Clock::now();
    submit_until(step + std::max(0, c.data.prefetch_steps));
    auto parts = std::move(ahead.front());
    ahead.pop_front();

    const double loss_scale = scaler.scale();
    StepWork w;
    w.step = step;
    w.parts = &parts;
    w.grad_scale = float(loss_scale / M);  // the loss is scaled for every micro-batch
    w.slot_of.assign(std::size_t(M), nullptr);
    w.inject_overflow = d.inject_overflow.first == topo.rank && d.inject_overflow.second == step;
    w.timeline = &timeline;
    const std::uint64_t bytes_before = d.groups.data->bytes_sent();
    d.buckets.start_step();

    const auto t_schedule = Clock::now();
    for (const parallel::PipeAction& a : actions) {
      if (a.kind == parallel::PipeAction::forward)
        d.forward(w, a.micro_batch);
      else
        d.backward(w, a.micro_batch, a.micro_batch == M - 1);  // both schedules run the backwards in order
    }
    const double schedule_ms = ms_since(t_schedule);

    // Exposed communication: what is left of the gradient all-reduce once backward is done.
    const auto t_comm = Clock::now();
    d.buckets.finish();
    d.link.finish_sends();
    const double comm_ms = topo.world > 1 ? ms_since(t_comm) : 0.0;
    if (topo.dp > 1) timeline.span("gradient all-reduce (exposed)", "allreduce", t_comm, Clock::now(), step);

    double stage_sum_squares = 0;
    std::vector<LayerRow> layer_rows = d.layer_rows(w.acts, loss_scale, stage_sum_squares);
    std::uint64_t nonfinite = 0;
    for (const LayerRow& r : layer_rows) nonfinite += r.nonfinite;
    // found_inf: one flag per step, agreed (MAX) over every rank, so that every rank skips the same
    // steps and holds the same scale.
    double flags[2] = {(nonfinite > 0 || !w.loss_finite || !std::isfinite(stage_sum_squares)) ? 1.0 : 0.0,
                       nonfinite > 0 ? 1.0 : 0.0};
    world.all_reduce(flags, 2, parallel::ReduceOp::max);
    const bool found_inf = flags[0] > 0;
    // The global norm counts each parameter once: one replica per stage adds its stage's squares.
    double sums[2] = {topo.dp_rank == 0 ? stage_sum_squares : 0.0, topo.last_stage() ? w.local_loss / topo.dp : 0.0};
    world.all_reduce(sums, 2, parallel::ReduceOp::sum);
    const double grad_norm = std::sqrt(sums[0]);
    const double loss = sums[1];
    if (found_inf && !amp) {
      std::string where;
      for (const LayerRow& r : layer_rows)
        if (r.nonfinite) where += (where.empty() ? "" : ", ") + r.layer;
      if (!where.empty()) throw Error("step " + std::to_string(step) + ": non-finite gradients in " + where);
      if (flags[1] > 0 || !rank0) throw ErrorElsewhere();
      throw Error("step " + std::to_string(step) + ": the gradient norm is not finite");
    }
    const bool applied = scaler.update(found_inf, step);
    float lr = 0;
    const auto t_opt = Clock::now();
    if (applied) {
      unscale_and_clip(d.be, d.params, grad_norm, loss_scale, c.optim.clip_norm);
      lr = learning_rate(c.optim, schedule_step++, c.train.steps);
      optimizer.step(lr);
      d.params.refresh_working(d.be);
    }
    if (d.perturb_weights.first == topo.rank && d.perturb_weights.second == step) {
      float first = 0;
      d.be.download(&first, d.params.values().data(), sizeof first);
      first += 1e-3f;
      d.be.upload(d.params.values().data(), &first, sizeof first);
    }
    const std::uint64_t grad_bytes = d.groups.data->bytes_sent() - bytes_before;
    d.end_step();
    d.params.zero_grads();
    timeline.span(applied ? "optimizer" : "optimizer (step skipped)", "optimizer", t_opt, Clock::now(), step);
    const double train_ms = ms_since(t_step);

    RankRow mine;
    mine.step = step;
    mine.rank = topo.rank;
    mine.pp_rank = topo.pp_rank;
    mine.dp_rank = topo.dp_rank;
    if (topo.last_stage()) mine.local_loss = w.local_loss;
    mine.loss_scale = loss_scale;
    mine.grad_norm_local = std::sqrt(topo.dp > 1 ? d.buckets.local_sum_squares() / (loss_scale * loss_scale)
                                                 : stage_sum_squares);
    mine.act_mb = double(w.act_bytes) / kMiB;
    mine.step_ms = train_ms;
    mine.schedule_ms = schedule_ms;
    mine.idle_ms = w.idle_ms;
    mine.comm_ms = comm_ms;
    mine.data_wait_ms = w.data_wait_ms;
    mine.grad_bytes = grad_bytes;
    // An arena counts what the tensors really took; elsewhere the model's own tally is used.
    mem_peak = tensor_memory().peak_bytes()
                   ? double(tensor_memory().peak_bytes())
                   : std::max(mem_peak, d.parameter_bytes() + double(w.act_bytes) + double(d.net.workspace().bytes()) +
                                            d.flow_bytes());
    RankReport report{mine, {}};
    if (topo.dp_rank == 0) report.layers = std::move(layer_rows);  // one replica per stage reports its modules
    const std::vector<std::string> reports = world.gather(encode_report(report), 0);

    StepRow row;
    row.step = step;
    row.epoch = sampler.epoch_of(step);
    row.loss = loss;
    row.grad_norm = grad_norm;
    row.loss_scale = loss_scale;
    row.skipped = applied ? 0 : 1;
    row.lr = lr;
    row.bubble_theory = bubble_theory;
    row.mem_peak_mb = mem_peak / kMiB;
    std::vector<RankRow> rank_rows;
    std::vector<LayerRow> all_layers;
    if (rank0) merge_reports(reports, topo.pp, row, rank_rows, all_layers);
    const bool last = step + 1 == c.train.steps;
    if ((c.train.eval_interval > 0 && (step + 1) % c.train.eval_interval == 0) || last) {
      const auto t_eval = Clock::now();
      d.check_replicas_agree(step);
      Impl::Evaluation e = d.evaluate(reader, sampler.validation());
      timeline.span("evaluation", "eval", t_eval, Clock::now(), step);
      if (!sampler.validation().empty()) {
        row.val_loss = e.loss;
        row.val_acc = e.acc;
        summary.val_loss = e.loss;
        summary.val_acc = e.acc;
      }
    }
    if (rank0) row.samples_per_s = c.global_batch(topo.dp) / (row.step_ms / 1000.0);
    step_times.push_back(train_ms);
    if (traces) {
      traces->write_step(row);
      traces->write_layers(step, all_layers);
      traces->write_ranks(rank_rows);
    }
    summary.steps = int(step + 1);
    summary.final_loss = loss;
    checkpoints.poll(log);
    if (checkpoints.due(step, last))
      checkpoints.save(d.be, d.params, optimizer, {step + 1, schedule_step, optimizer.updates(), scaler.state()},
                       fingerprint, log);
    if (rank0 && ((c.train.log_interval > 0 && (step + 1) % c.train.log_interval == 0) || last || row.val_acc)) {
      log << "[rank 0] step " << std::setw(5) << step + 1 << "/" << c.train.steps << "  loss " << std::setprecision(4)
          << loss << "  grad_norm " << std::setprecision(3) << grad_norm << "  lr " << std::scientific
          << std::setprecision(2) << lr << std::fixed << "  " << std::setprecision(1) << row.step_ms << " ms";
      if (topo.pp > 1) log << "  bubble " << std::setprecision(3) << row.bubble;
      if (topo.dp > 1) log << "  comm " << std::setprecision(1) << row.comm_ms << " ms";
      if (amp && scaler.kind() != LossScaler::Kind::none)
        log << "  scale " << std::setprecision(0) << loss_scale << "  skipped " << scaler.skipped();
      if (row.val_acc) log << "  val_loss " << std::setprecision(4) << *row.val_loss << "  val_acc " << *row.val_acc;
      log << std::endl;
    }
  }
  checkpoints.finish(log);
  const std::vector<std::string> events =
      timeline.enabled() ? world.gather(timeline.events_json(), 0) : std::vector<std::string>();
  if (rank0 && timeline.enabled()) {
    std::vector<std::string> labels;
    for (int r = 0; r < topo.world; ++r)
      labels.push_back("rank " + std::to_string(r) + " (stage " + std::to_string(r / topo.dp) + ", replica " +
                       std::to_string(r % topo.dp) + ")");
    Timeline::write(c.parallel.timeline, events, labels);
    log << "[rank 0] timeline: " << c.parallel.timeline << " (chrome://tracing or ui.perfetto.dev)" << std::endl;
  }
  summary.step_ms = step_times;
  summary.skipped = scaler.skipped();
  if (!step_times.empty()) {
    std::sort(step_times.begin(), step_times.end());
    summary.median_step_ms = step_times[step_times.size() / 2];
  }
  return summary;
}

nlohmann::json Trainer::evaluate_checkpoint(const nlohmann::json& manifest, std::ostream& log) {
  Impl& d = *impl_;
  const RunConfig& c = d.config;
  require(c.resume != "none", "--eval-only needs a checkpoint: --resume auto (the newest committed one) or a directory");
  data::Sampler sampler(d.shards.info().total_samples, c.data.val_fraction, c.train.seed, c.global_batch(d.topo.dp));
  Checkpointing checkpoints(c, d.topo, *d.groups.world);
  const std::optional<checkpoint::Counters> loaded =
      checkpoints.resume(d.be, d.params, nullptr, d.fingerprint(manifest), log);
  require(loaded.has_value(), "--eval-only: no committed checkpoint under " +
                                  (checkpoints.dir().empty() ? std::string("(no --out or checkpoint.dir)") : checkpoints.dir()));
  d.params.refresh_working(d.be);
  require(!sampler.validation().empty(), "--eval-only: the validation split is empty (data.val_fraction)");
  data::Prefetcher reader(d.shards);
  const Impl::Evaluation e = d.evaluate(reader, sampler.validation());
  const std::string& which = checkpoints.loaded();
  nlohmann::json result = {{"checkpoint", which}, {"step", loaded->next_step}, {"val_loss", e.loss},
                           {"val_acc", e.acc}, {"val_samples", sampler.validation().size()},
                           {"val_indices", sampler.validation()}};  // global sample indices, for other tools
  if (d.topo.rank == 0) {
    log << "[rank 0] eval-only: " << which << " (after step " << loaded->next_step << "): val_loss "
        << std::setprecision(6) << e.loss << "  val_acc " << e.acc << " over " << sampler.validation().size()
        << " samples" << std::endl;
    if (!c.train.out.empty()) write_file_atomically(c.train.out + "/eval.json", result.dump(2) + "\n");
  }
  return result;
}

}  // namespace avtrain
