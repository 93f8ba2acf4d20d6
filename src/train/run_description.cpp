#include "train/run_description.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

#include "model/av_net.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "precision/precision_policy.hpp"
#include "train/run_config.hpp"
#include "train/stage_plan.hpp"

namespace avtrain {

namespace {
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

// Bytes each layer keeps for backward after a forward of `probe` (one micro-batch in flight).
std::vector<std::size_t> activation_bytes(AVNet& net, const data::MicroBatch& probe) {
  auto states = net.make_states();
  Flow flow;
  flow.batch = &probe;
  flow.mode = Mode::train;
  net.forward(flow, states);
  std::vector<std::size_t> bytes;
  for (const auto& st : states) bytes.push_back(st->bytes());
  return bytes;
}

// What one micro-batch of B samples takes: the bytes each layer keeps for backward, and the
// workspace. Every saved tensor and workspace slot is affine in the batch (per-sample tensors plus
// per-channel statistics), so probes of 1 and 2 samples give it for any B exactly, without a
// forward of B samples: a deck sized for a large GPU would not fit a login node's memory.
struct MicroBatchMemory {
  std::vector<std::size_t> layers;
  std::size_t workspace = 0;
};
MicroBatchMemory micro_batch_memory(AVNet& net, const data::SetInfo& s, int B) {
  const auto measure = [&](int b) {
    const data::MicroBatch probe = full_length_probe(s, b);
    MicroBatchMemory m;
    m.layers = activation_bytes(net, probe);
    m.workspace = net.workspace().bytes();
    return m;
  };
  const MicroBatchMemory one = measure(1);
  if (B == 1) return one;
  const MicroBatchMemory two = measure(2);
  const auto at_b = [&](std::size_t a1, std::size_t a2) { return a1 + std::size_t(B - 1) * (a2 - a1); };
  MicroBatchMemory m;
  for (std::size_t i = 0; i < one.layers.size(); ++i) m.layers.push_back(at_b(one.layers[i], two.layers[i]));
  m.workspace = at_b(one.workspace, two.workspace);
  return m;
}

std::size_t sum(const std::vector<std::size_t>& v) {
  std::size_t s = 0;
  for (std::size_t x : v) s += x;
  return s;
}

std::string mib(double bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << bytes / (1024.0 * 1024.0) << " MiB";
  return s.str();
}

// Under parallel.zero 1, whose share the optimizer line shows.
std::string zero_note(const RunConfig& c) {
  if (c.parallel.zero != 1) return "";
  if (c.parallel.dp < 1) return " (parallel.zero 1 splits it over the replicas: give --dp to see one replica's part)";
  return " (parallel.zero 1: replica 0's part of " + std::to_string(c.parallel.dp) + ")";
}
}  // namespace

void describe_run(const RunConfig& c, Backend& be, data::ShardSet& shards, std::ostream& out) {
  const data::SetInfo s = data::cropped_input(shards.info(), c.data.clip_seconds);
  const int pp = c.parallel.pp;
  const StagePlan plan = plan_stages(c, be, s, pp);
  const PrecisionPolicy policy(c.precision);
  const Recompute recompute = c.train.recompute;
  // The stage's training state as a run of this layout builds it: under parallel.zero 1 with --dp,
  // replica 0's part of the optimizer state (and, in fp16/bf16, of the masters).
  DistributedOptimizer optimizer(be, distributed_optimizer_config(c));
  ParamStore& params = optimizer.params();
  AVNet net(be, params, c.model, s, policy, {}, recompute);
  optimizer.build(std::max(1, c.parallel.dp), 0, nullptr);

  const TokenGeometry& g = net.geometry();
  out << "AVNet on " << s.shards.size() << " shard(s), " << s.total_samples << " samples: audio " << s.audio_samples
      << " samples @ " << s.sample_rate << " Hz, video " << s.frames << "x" << s.height << "x" << s.width << "x"
      << s.channels << ", " << s.num_classes << " classes";
  if (!s.class_names.empty()) {
    out << " (";
    for (std::size_t c = 0; c < s.class_names.size(); ++c) out << (c ? ", " : "") << s.class_names[c];
    out << ")";
  }
  out << "\n";
  out << "tokens per sample: " << g.audio_tokens << " audio (from " << g.frames << " frames) + " << g.video_tokens
      << " video = " << g.tokens << "\n\n";
  out << std::left << std::setw(28) << "layer" << std::setw(28) << "module" << std::right << std::setw(12)
      << "parameters" << "\n";
  std::size_t total = 0;
  for (std::size_t i = 0; i < net.layers().size(); ++i) {
    const auto [first, last] = net.param_range(i);
    std::map<std::string, std::size_t> per_module;
    std::vector<std::string> order;
    for (ParamId id = first; id < last; ++id) {
      const ParamInfo& p = params.info(id);
      if (!p.trainable) continue;
      if (!per_module.count(p.module)) order.push_back(p.module);
      per_module[p.module] += p.size;
      total += p.size;
    }
    for (const std::string& module : order)
      out << std::left << std::setw(28) << net.layers()[i]->name() << std::setw(28) << module << std::right
          << std::setw(12) << per_module[module] << "\n";
  }
  out << std::left << std::setw(56) << "total trainable" << std::right << std::setw(12) << total << "\n\n";

  // Activation memory: measured by forwards of all-valid micro-batches, in this run's precision
  // and, for comparison, in fp32.
  const int B = c.train.micro_batch;
  const MicroBatchMemory memory = micro_batch_memory(net, s, B);
  const std::vector<std::size_t>& act = memory.layers;
  const double workspace = double(memory.workspace);
  AdamW& adamw = optimizer.adamw();
  const double p4 = double(params.total_size()) * 4,
               moments = double(adamw.first_moments().bytes() + adamw.second_moments().bytes());
  const char* mode = dtype_name(policy.compute());
  out << "precision: " << mode << ", products on " << be.gemm_engine(policy.compute()) << "\n";
  out << "memory estimate (" << mode << ", one rank holding the whole net):\n"
      << "  parameters        " << mib(double(params.masters().bytes())) << " (fp32 masters"
      << (params.masters_split() ? ", this replica's part" : "") << ")\n";
  if (params.masters_split())
    out << "  fp32 values       " << mib(double(params.values().bytes()))
        << " (the parameters without a 16-bit working copy, whole)\n";
  out << "  working copies    " << mib(double(params.working_bytes())) << "\n"
      << "  gradients         " << mib(p4) << "\n"
      << "  optimizer (AdamW) " << mib(moments) << zero_note(c) << "\n"
      << "  activations       " << mib(double(sum(act))) << " per micro-batch of " << B << " (train.recompute "
      << enum_name(recompute) << ")\n";
  if (policy.compute() != DType::f32) {
    ParamStore params32;
    AVNet net32(be, params32, c.model, s);
    params32.allocate(c.train.seed);
    const std::size_t act32 = sum(micro_batch_memory(net32, s, B).layers);
    std::ostringstream ratio;
    ratio << std::fixed << std::setprecision(3) << double(sum(act)) / double(act32);
    out << "                    (fp32: " << mib(double(act32)) << "; ratio " << ratio.str() << ")\n";
  }
  const double parameter_bytes = optimizer.bytes();
  out << "  workspace         " << mib(workspace) << " (fp32 scratch shared by the layers)\n"
      << "  total             " << mib(parameter_bytes + double(sum(act)) + workspace) << "\n";

  // What each recompute setting keeps, measured the same way, against what this process has for tensors.
  const double available = double(be.memory_for_tensors());
  out << "\nactivation recomputation (train.recompute; every setting gives the same results), one micro-batch of " << B
      << ",\nthe whole net on one rank, against " << mib(available) << " for tensors here:\n";
  out << "  " << std::left << std::setw(12) << "setting" << std::right << std::setw(18) << "activations" << std::setw(18)
      << "workspace" << std::setw(18) << "total" << "\n";
  for (const Recompute r : {Recompute::none, Recompute::attention, Recompute::blocks}) {
    MicroBatchMemory m;
    if (r == recompute) {
      m = memory;
    } else {
      ParamStore other_params;
      AVNet other(be, other_params, c.model, s, policy, {}, r);
      other_params.allocate(c.train.seed);
      other_params.refresh_working(be);
      m = micro_batch_memory(other, s, B);
    }
    const double total_r = parameter_bytes + double(sum(m.layers)) + double(m.workspace);
    out << "  " << std::left << std::setw(12) << enum_name(r) << std::right << std::setw(18)
        << mib(double(sum(m.layers))) << std::setw(18) << mib(double(m.workspace)) << std::setw(18) << mib(total_r)
        << "  " << (total_r <= available ? "fits" : "does not fit") << (r == recompute ? "  (this run)" : "") << "\n";
  }

  // The pipeline cut: each stage with its share of the work and, under the schedule, of memory.
  const parallel::Schedule schedule = c.parallel.schedule;
  const int M = c.train.micro_batches;
  out << "\npipeline: " << pp << " stage(s), partition " << c.parallel.partition << ", schedule "
      << enum_name(schedule) << ", " << M << " micro-batch(es) per step; ideal bubble "
      << std::fixed << std::setprecision(3) << parallel::ideal_bubble(pp, M) << "\n";
  out << std::left << std::setw(7) << "stage" << std::setw(24) << "layers" << std::right << std::setw(12)
      << "parameters" << std::setw(14) << "fwd GFLOP/mb" << std::setw(16) << "act MiB/mb" << std::setw(11)
      << "in flight" << std::setw(16) << "peak act MiB" << "\n";
  for (int st = 0; st < pp; ++st) {
    const parallel::StageRange r = plan.stages[st];
    std::size_t n = 0, bytes = 0;
    double flops = 0;
    for (int i = r.first; i < r.last; ++i) {
      n += plan.layers[i].params;
      flops += plan.layers[i].flops;
      bytes += act[i];
    }
    const int in_flight = parallel::max_in_flight(schedule, pp, st, M);
    const std::string names = plan.layers[r.first].name + (r.last - r.first > 1 ? " .. " + plan.layers[r.last - 1].name : "");
    out << std::left << std::setw(7) << st << std::setw(24) << names << std::right << std::setw(12) << n
        << std::setw(14) << std::setprecision(3) << flops / 1e9 << std::setw(16) << std::setprecision(2)
        << double(bytes) / (1024.0 * 1024.0) << std::setw(11) << in_flight << std::setw(16)
        << double(bytes) * in_flight / (1024.0 * 1024.0) << "\n";
  }
}

}  // namespace avtrain
