#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <future>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "data/prefetcher.hpp"
#include "data/sampler.hpp"
#include "io/trace_writer.hpp"
#include "model/av_net.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_clip.hpp"
#include "optim/lr_schedule.hpp"
#include "precision/loss_scaler.hpp"
#include "precision/precision_policy.hpp"

namespace avtrain {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

constexpr double kMiB = 1024.0 * 1024.0;

// Below this |g| a gradient value is not held at full precision by the compute type: its smallest
// normal. An fp32 run reports against fp16's, what an fp16 run of it would lose.
float underflow_threshold(DType compute) { return compute == DType::bf16 ? 0x1p-126f : 0x1p-14f; }

// A micro-batch with every sample at full length: what the memory estimate runs.
data::MicroBatch full_length_probe(const data::SetInfo& s, int B) {
  data::MicroBatch probe;
  probe.size = B;
  probe.audio.assign(std::size_t(B) * s.audio_samples, 0.0f);
  probe.audio_len.assign(B, int(s.audio_samples));
  probe.video.assign(std::size_t(B) * s.frames * s.height * s.width * s.channels, 0);
  probe.video_len.assign(B, s.frames);
  probe.label.assign(B, 0);
  probe.index.assign(B, 0);
  return probe;
}

// Bytes the layers keep for backward after a forward of `probe` (one micro-batch in flight).
std::size_t activation_bytes(AVNet& net, const data::MicroBatch& probe) {
  auto states = net.make_states();
  Flow flow;
  flow.batch = &probe;
  flow.mode = Mode::train;
  net.forward(flow, states);
  std::size_t bytes = 0;
  for (const auto& st : states) bytes += st->bytes();
  return bytes;
}

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

std::string human_bytes(double bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << bytes / (1024.0 * 1024.0) << " MiB";
  return s.str();
}
}  // namespace

struct Trainer::Impl {
  const RunConfig& config;
  Backend& be;
  data::ShardSet& shards;
  PrecisionPolicy policy;
  ParamStore params;
  AVNet net;
  std::vector<std::unique_ptr<LayerState>> states;
  std::vector<ModuleGroup> modules;

  Impl(const RunConfig& c, Backend& b, data::ShardSet& s)
      : config(c), be(b), shards(s), policy(c.precision), net(b, params, c.model, s.info(), policy) {
    params.allocate(c.train.seed);
    params.refresh_working(be);
    states = net.make_states();
    modules = group_modules(params);
  }

  // Parameters, main grads, AdamW moments (4 bytes each) and the working copies.
  double parameter_bytes() const { return 16.0 * double(params.total_size()) + double(params.working_bytes()); }

  // One row per module, from the gradients as accumulated (multiplied by loss_scale): norms are
  // reported unscaled, the underflow share as the compute type sees the scaled values.
  // `grad_sum_squares` gets the unscaled global norm's square.
  std::vector<LayerRow> layer_rows(const ActivationStats& acts, double loss_scale, double& grad_sum_squares) {
    std::vector<LayerRow> rows;
    grad_sum_squares = 0;
    const float threshold = underflow_threshold(policy.compute());
    const double unscale2 = 1.0 / (loss_scale * loss_scale);
    for (const ModuleGroup& g : modules) {
      LayerRow r;
      r.layer = g.name;
      double gsq = 0, psq = 0;
      std::size_t underflow = 0, size = 0;
      for (ParamId id : g.params) {
        const ParamInfo& p = params.info(id);
        const Backend::TensorStats s = be.tensor_stats(params.grad(id), p.size, threshold);
        gsq += s.sum_squares * unscale2;
        underflow += (p.size - s.nonzero) + s.below;  // zeros included: a flushed value is the extreme case
        size += p.size;
        r.nonfinite += s.nonfinite;
        psq += be.sum_squares(params.value(id), p.size);
      }
      grad_sum_squares += gsq;
      r.grad_norm = std::sqrt(gsq);
      r.param_norm = std::sqrt(psq);
      r.grad_underflow_frac = size ? double(underflow) / double(size) : 0.0;
      if (auto it = acts.find(g.name); it != acts.end()) r.act_absmax = it->second;
      rows.push_back(std::move(r));
    }
    return rows;
  }

  struct Evaluation {
    double loss = 0, acc = 0;
  };

  Evaluation evaluate(data::Prefetcher& reader, const std::vector<std::int64_t>& val) {
    Evaluation e;
    if (val.empty()) return e;
    // A few micro-batches are read ahead, never the whole split: memory stays bounded.
    const std::size_t mb = std::size_t(config.train.micro_batch);
    const std::size_t ahead = std::size_t(std::max(1, config.data.prefetch_steps) * config.train.micro_batches);
    std::deque<std::future<data::MicroBatch>> pending;
    std::size_t next = 0;
    auto refill = [&] {
      for (; next < val.size() && pending.size() < ahead; next += mb)
        pending.push_back(reader.submit({val.begin() + next, val.begin() + std::min(val.size(), next + mb)}));
    };
    double loss_sum = 0;
    std::int64_t correct = 0;
    Flow flow;
    for (refill(); !pending.empty(); refill()) {
      data::MicroBatch batch = pending.front().get();
      pending.pop_front();
      flow.batch = &batch;
      flow.mode = Mode::eval;
      net.forward(flow, states);
      loss_sum += flow.ce_loss * batch.size;
      correct += flow.correct;
    }
    e.loss = loss_sum / double(val.size());
    e.acc = double(correct) / double(val.size());
    return e;
  }
};

Trainer::Trainer(const RunConfig& config, Backend& backend, data::ShardSet& shards)
    : impl_(std::make_unique<Impl>(config, backend, shards)) {}

Trainer::~Trainer() = default;

void Trainer::describe(std::ostream& out) {
  Impl& d = *impl_;
  const TokenGeometry& g = d.net.geometry();
  const data::SetInfo& s = d.shards.info();
  out << "AVNet on " << s.shards.size() << " shard(s), " << s.total_samples << " samples: audio " << s.audio_samples
      << " samples @ " << s.sample_rate << " Hz, video " << s.frames << "x" << s.height << "x" << s.width << "x"
      << s.channels << ", " << s.num_classes << " classes\n";
  out << "tokens per sample: " << g.audio_tokens << " audio (from " << g.frames << " frames) + " << g.video_tokens
      << " video = " << g.tokens << "\n\n";
  out << std::left << std::setw(28) << "layer" << std::setw(28) << "module" << std::right << std::setw(12)
      << "parameters" << "\n";
  std::size_t total = 0;
  for (std::size_t i = 0; i < d.net.layers().size(); ++i) {
    const auto [first, last] = d.net.param_range(i);
    std::map<std::string, std::size_t> per_module;
    std::vector<std::string> order;
    for (ParamId id = first; id < last; ++id) {
      const ParamInfo& p = d.params.info(id);
      if (!p.trainable) continue;
      if (!per_module.count(p.module)) order.push_back(p.module);
      per_module[p.module] += p.size;
      total += p.size;
    }
    for (const std::string& module : order)
      out << std::left << std::setw(28) << d.net.layers()[i]->name() << std::setw(28) << module << std::right
          << std::setw(12) << per_module[module] << "\n";
  }
  out << std::left << std::setw(56) << "total trainable" << std::right << std::setw(12) << total << "\n\n";

  // Activation memory: measured by running one forward on an all-valid micro-batch, in this run's
  // precision and, for comparison, in fp32.
  const int B = d.config.train.micro_batch;
  const data::MicroBatch probe = full_length_probe(s, B);
  const std::vector<float> saved(d.params.values().data(), d.params.values().data() + d.params.values().size());
  const std::size_t act = activation_bytes(d.net, probe);
  std::copy(saved.begin(), saved.end(), d.params.values().data());  // the probe moved BatchNorm's running stats
  const double workspace = double(d.net.workspace().bytes());
  const double p4 = double(d.params.total_size()) * 4;
  const char* mode = dtype_name(d.policy.compute());
  out << "precision: " << mode << ", products on " << d.be.gemm_engine(d.policy.compute()) << "\n";
  out << "memory estimate (" << mode << "):\n"
      << "  parameters        " << human_bytes(p4) << " (fp32 masters)\n"
      << "  working copies    " << human_bytes(double(d.params.working_bytes())) << "\n"
      << "  gradients         " << human_bytes(p4) << "\n"
      << "  optimizer (AdamW) " << human_bytes(2 * p4) << "\n"
      << "  activations       " << human_bytes(double(act)) << " per micro-batch of " << B << "\n";
  if (d.policy.compute() != DType::f32) {
    ParamStore params32;
    AVNet net32(d.be, params32, d.config.model, s);
    params32.allocate(d.config.train.seed);
    const std::size_t act32 = activation_bytes(net32, probe);
    std::ostringstream ratio;
    ratio << std::fixed << std::setprecision(3) << double(act) / double(act32);
    out << "                    (fp32: " << human_bytes(double(act32)) << "; ratio " << ratio.str() << ")\n";
  }
  out << "  workspace         " << human_bytes(workspace) << " (fp32 scratch shared by the layers)\n"
      << "  total             " << human_bytes(d.parameter_bytes() + double(act) + workspace) << "\n";
}

TrainSummary Trainer::run(nlohmann::json manifest, std::ostream& log) {
  Impl& d = *impl_;
  const RunConfig& c = d.config;
  const int M = c.train.micro_batches, mb = c.train.micro_batch;
  data::Sampler sampler(d.shards.info().total_samples, c.data.val_fraction, c.train.seed, c.global_batch());
  AdamW optimizer(d.be, d.params, c.optim);
  LossScaler scaler(c.precision, d.policy.compute());
  const bool amp = d.policy.compute() != DType::f32;

  std::unique_ptr<TraceWriter> traces;
  if (!c.train.out.empty()) {
    traces = std::make_unique<TraceWriter>(c.train.out);
    manifest["model"]["parameters"] = d.params.trainable_count();
    manifest["model"]["tokens"] = d.net.geometry().tokens;
    manifest["model"]["audio_tokens"] = d.net.geometry().audio_tokens;
    manifest["model"]["video_tokens"] = d.net.geometry().video_tokens;
    manifest["data"]["train_samples"] = sampler.train_size();
    manifest["data"]["val_samples"] = sampler.validation().size();
    manifest["data"]["steps_per_epoch"] = sampler.steps_per_epoch();
    nlohmann::json fp32_modules = nlohmann::json::array();
    for (const ModuleGroup& g : d.modules)
      if (amp && d.policy.of(g.name) == DType::f32) fp32_modules.push_back(g.name);
    manifest["precision"] = {{"mode", dtype_name(d.policy.compute())},
                             {"products", d.be.gemm_engine(d.policy.compute())},
                             {"loss_scaling", scaler.describe()},
                             {"fp32_modules", fp32_modules}};
    write_file_atomically(c.train.out + "/run.json", manifest.dump(2) + "\n");
  }

  data::Prefetcher reader(d.shards);
  std::deque<std::vector<std::future<data::MicroBatch>>> ahead;
  std::int64_t next_to_submit = 0;
  auto submit_until = [&](std::int64_t last) {
    for (; next_to_submit <= last && next_to_submit < c.train.steps; ++next_to_submit) {
      std::vector<std::int64_t> global = sampler.batch(next_to_submit);
      std::vector<std::future<data::MicroBatch>> parts;
      for (int m = 0; m < M; ++m)
        parts.push_back(reader.submit({global.begin() + std::int64_t(m) * mb, global.begin() + std::int64_t(m + 1) * mb}));
      ahead.push_back(std::move(parts));
    }
  };

  TrainSummary summary;
  std::vector<double> step_times;
  Flow flow;  // its buffers are reused step after step
  flow.detect_anomaly = c.precision.detect_anomaly;
  int schedule_step = 0;  // steps applied: a skipped step does not advance the schedule
  double mem_peak = 0;
  if (amp) log << "precision " << dtype_name(d.policy.compute()) << ", loss scaling " << scaler.describe() << "\n";
  log << std::fixed;
  for (std::int64_t step = 0; step < c.train.steps; ++step) {
    const auto t_step = Clock::now();
    submit_until(step + std::max(0, c.data.prefetch_steps));
    auto parts = std::move(ahead.front());
    ahead.pop_front();

    ActivationStats acts;
    const double loss_scale = scaler.scale();
    double loss = 0, data_wait = 0;
    std::size_t act_bytes = 0;
    bool loss_finite = true;
    for (int m = 0; m < M; ++m) {
      const auto t_wait = Clock::now();
      data::MicroBatch batch = parts[m].get();
      data_wait += ms_since(t_wait);
      flow.batch = &batch;
      flow.mode = Mode::train;
      flow.step = step;
      flow.grad_scale = float(loss_scale / M);  // the loss is scaled for every micro-batch
      flow.act_stats = &acts;
      d.net.forward(flow, d.states);
      std::size_t held = 0;
      for (const auto& st : d.states) held += st->bytes();
      act_bytes = std::max(act_bytes, held);
      if (!std::isfinite(flow.loss)) {
        // fp32 has no excuse for it; in fp16/bf16 an overflow is what the scaler handles.
        if (!amp || c.precision.detect_anomaly)
          throw Error("step " + std::to_string(step) + ": the loss of micro-batch " + std::to_string(m) +
                      " is not finite (" + std::to_string(flow.loss) + ")");
        loss_finite = false;
      }
      d.net.backward(flow, d.states);
      loss += flow.loss / M;
    }

    double grad_sum_squares = 0;
    std::vector<LayerRow> layer_rows = d.layer_rows(acts, loss_scale, grad_sum_squares);
    const double grad_norm = std::sqrt(grad_sum_squares);
    std::uint64_t nonfinite = 0;
    for (const LayerRow& r : layer_rows) nonfinite += r.nonfinite;
    // One flag per step. With several ranks it is reduced (MAX) over all of them right here, so
    // that every rank skips the same steps and holds the same scale.
    const bool found_inf = nonfinite > 0 || !loss_finite || !std::isfinite(grad_norm);
    if (found_inf && !amp) {
      std::string where;
      for (const LayerRow& r : layer_rows)
        if (r.nonfinite) where += (where.empty() ? "" : ", ") + r.layer;
      throw Error("step " + std::to_string(step) + ": non-finite gradients in " + (where.empty() ? "the norm" : where));
    }
    const bool applied = scaler.update(found_inf, step);
    float lr = 0;
    if (applied) {
      unscale_and_clip(d.be, d.params, grad_norm, loss_scale, c.optim.clip_norm);
      lr = learning_rate(c.optim, schedule_step++, c.train.steps);
      optimizer.step(lr);
      d.params.refresh_working(d.be);
    }
    d.params.zero_grads();

    StepRow row;
    row.step = step;
    row.epoch = sampler.epoch_of(step);
    row.loss = loss;
    row.grad_norm = grad_norm;
    row.loss_scale = loss_scale;
    row.skipped = applied ? 0 : 1;
    row.lr = lr;
    row.data_wait_ms = data_wait;
    const bool last = step + 1 == c.train.steps;
    const double train_ms = ms_since(t_step);
    if ((c.train.eval_interval > 0 && (step + 1) % c.train.eval_interval == 0) || last) {
      Impl::Evaluation e = d.evaluate(reader, sampler.validation());
      if (!sampler.validation().empty()) {
        row.val_loss = e.loss;
        row.val_acc = e.acc;
        summary.val_loss = e.loss;
        summary.val_acc = e.acc;
      }
    }
    row.step_ms = train_ms;
    row.samples_per_s = c.global_batch() / (train_ms / 1000.0);
    row.act_mb = double(act_bytes) / kMiB;
    mem_peak = std::max(mem_peak, d.parameter_bytes() + double(act_bytes) + double(d.net.workspace().bytes()) +
                                      double(flow.x.bytes() + flow.dx.bytes()));
    row.mem_peak_mb = mem_peak / kMiB;
    step_times.push_back(train_ms);
    if (traces) {
      traces->write_step(row);
      traces->write_layers(step, layer_rows);
    }
    summary.steps = int(step + 1);
    summary.final_loss = loss;
    if ((c.train.log_interval > 0 && (step + 1) % c.train.log_interval == 0) || last || row.val_acc) {
      log << "step " << std::setw(5) << step + 1 << "/" << c.train.steps << "  loss " << std::setprecision(4) << loss
          << "  grad_norm " << std::setprecision(3) << grad_norm << "  lr " << std::scientific << std::setprecision(2)
          << lr << std::fixed << "  " << std::setprecision(1) << train_ms << " ms";
      if (amp && scaler.kind() != LossScaler::Kind::none)
        log << "  scale " << std::setprecision(0) << loss_scale << "  skipped " << scaler.skipped();
      if (row.val_acc) log << "  val_loss " << std::setprecision(4) << *row.val_loss << "  val_acc " << *row.val_acc;
      log << std::endl;
    }
  }
  summary.step_ms = step_times;
  summary.skipped = scaler.skipped();
  if (!step_times.empty()) {
    std::sort(step_times.begin(), step_times.end());
    summary.median_step_ms = step_times[step_times.size() / 2];
  }
  return summary;
}

}  // namespace avtrain
