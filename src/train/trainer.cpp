#include "train/trainer.hpp"

#include <sys/resource.h>

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

namespace avtrain {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
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
  ParamStore params;
  AVNet net;
  std::vector<std::unique_ptr<LayerState>> states;
  std::vector<ModuleGroup> modules;

  Impl(const RunConfig& c, Backend& b, data::ShardSet& s)
      : config(c), be(b), shards(s), net(b, params, c.model, s.info()) {
    params.allocate(c.train.seed);
    states = net.make_states();
    modules = group_modules(params);
  }

  // One row per module; `grad_sum_squares` gets the sum over all of them (the global norm's square).
  std::vector<LayerRow> layer_rows(const ActivationStats& acts, double& grad_sum_squares) {
    std::vector<LayerRow> rows;
    grad_sum_squares = 0;
    for (const ModuleGroup& g : modules) {
      LayerRow r;
      r.layer = g.name;
      double gsq = 0, psq = 0;
      std::size_t below = 0, nonzero = 0;
      for (ParamId id : g.params) {
        const ParamInfo& p = params.info(id);
        const Backend::TensorStats s = be.tensor_stats(params.grad(id), p.size, 0x1p-24f);  // smallest fp16 subnormal
        gsq += s.sum_squares;
        below += s.below;
        nonzero += s.nonzero;
        r.nonfinite += s.nonfinite;
        psq += be.sum_squares(params.value(id), p.size);
      }
      grad_sum_squares += gsq;
      r.grad_norm = std::sqrt(gsq);
      r.param_norm = std::sqrt(psq);
      r.grad_underflow_frac = nonzero ? double(below) / double(nonzero) : 0.0;
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

  // Activation memory: measured by running one forward and backward on an all-valid micro-batch.
  data::MicroBatch probe;
  const int B = d.config.train.micro_batch;
  probe.size = B;
  probe.audio.assign(std::size_t(B) * s.audio_samples, 0.0f);
  probe.audio_len.assign(B, int(s.audio_samples));
  probe.video.assign(std::size_t(B) * s.frames * s.height * s.width * s.channels, 0);
  probe.video_len.assign(B, s.frames);
  probe.label.assign(B, 0);
  probe.index.assign(B, 0);
  auto states = d.net.make_states();
  const std::vector<float> saved(d.params.values().data(), d.params.values().data() + d.params.values().size());
  Flow flow;
  flow.batch = &probe;
  d.net.forward(flow, states);
  d.net.backward(flow, states);
  d.params.zero_grads();
  std::copy(saved.begin(), saved.end(), d.params.values().data());  // the probe moved BatchNorm's running stats
  std::size_t act = flow.x.size() * 4 + flow.dx.size() * 4;
  for (const auto& st : states) act += st->bytes();
  const double p4 = double(d.params.total_size()) * 4;
  out << "memory estimate (fp32):\n"
      << "  parameters        " << human_bytes(p4) << "\n"
      << "  gradients         " << human_bytes(p4) << "\n"
      << "  optimizer (AdamW) " << human_bytes(2 * p4) << "\n"
      << "  activations       " << human_bytes(double(act)) << " per micro-batch of " << B << "\n"
      << "  total             " << human_bytes(4 * p4 + double(act)) << "\n";
}

TrainSummary Trainer::run(nlohmann::json manifest, std::ostream& log) {
  Impl& d = *impl_;
  const RunConfig& c = d.config;
  const int M = c.train.micro_batches, mb = c.train.micro_batch;
  data::Sampler sampler(d.shards.info().total_samples, c.data.val_fraction, c.train.seed, c.global_batch());
  AdamW optimizer(d.be, d.params, c.optim);

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
  log << std::fixed;
  for (std::int64_t step = 0; step < c.train.steps; ++step) {
    const auto t_step = Clock::now();
    submit_until(step + std::max(0, c.data.prefetch_steps));
    auto parts = std::move(ahead.front());
    ahead.pop_front();

    ActivationStats acts;
    double loss = 0, data_wait = 0;
    for (int m = 0; m < M; ++m) {
      const auto t_wait = Clock::now();
      data::MicroBatch batch = parts[m].get();
      data_wait += ms_since(t_wait);
      flow.batch = &batch;
      flow.mode = Mode::train;
      flow.grad_scale = 1.0f / float(M);
      flow.act_stats = &acts;
      d.net.forward(flow, d.states);
      if (!std::isfinite(flow.loss))
        throw Error("step " + std::to_string(step) + ": the loss of micro-batch " + std::to_string(m) +
                    " is not finite (" + std::to_string(flow.loss) + ")");
      d.net.backward(flow, d.states);
      loss += flow.loss / M;
    }

    double grad_sum_squares = 0;
    std::vector<LayerRow> layer_rows = d.layer_rows(acts, grad_sum_squares);
    const double grad_norm = std::sqrt(grad_sum_squares);
    if (!std::isfinite(grad_norm)) {
      std::string where;
      for (const LayerRow& r : layer_rows)
        if (r.nonfinite) where += (where.empty() ? "" : ", ") + r.layer;
      throw Error("step " + std::to_string(step) + ": non-finite gradients in " + where);
    }
    clip_gradients(d.be, d.params, grad_norm, c.optim.clip_norm);
    const float lr = learning_rate(c.optim, int(step), c.train.steps);
    optimizer.step(lr);
    d.params.zero_grads();

    StepRow row;
    row.step = step;
    row.epoch = sampler.epoch_of(step);
    row.loss = loss;
    row.grad_norm = grad_norm;
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
    row.mem_peak_mb = peak_rss_mb();
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
      if (row.val_acc) log << "  val_loss " << std::setprecision(4) << *row.val_loss << "  val_acc " << *row.val_acc;
      log << std::endl;
    }
  }
  summary.step_ms = step_times;
  if (!step_times.empty()) {
    std::sort(step_times.begin(), step_times.end());
    summary.median_step_ms = step_times[step_times.size() / 2];
  }
  return summary;
}

}  // namespace avtrain
