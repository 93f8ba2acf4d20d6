#include "train/run_description.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

#include "model/av_net.hpp"
#include "model/token_parts.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "precision/precision_policy.hpp"
#include "train/run_config.hpp"
#include "train/device_fit.hpp"
#include "train/stage_plan.hpp"

namespace avtrain {

namespace {
std::string mib(double bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << bytes / (1024.0 * 1024.0) << " MiB";
  return s.str();
}

// Under parallel.zero 1, whose share the optimizer line shows: over the stage's dp x cp ranks.
std::string zero_note(const RunConfig& c) {
  if (c.parallel.zero != 1) return "";
  if (c.parallel.dp < 1) return " (parallel.zero 1 splits it over the replicas: give --dp to see one replica's part)";
  if (c.parallel.cp > 1)
    return " (parallel.zero 1: rank 0's part of dp x cp = " + std::to_string(c.parallel.dp) + " x " +
           std::to_string(c.parallel.cp) + ")";
  return " (parallel.zero 1: replica 0's part of " + std::to_string(c.parallel.dp) + ")";
}

// The bytes each trainable parameter costs with fp32 masters and without (precision.master_weights),
// one rank holding it whole: a 16-bit weight master 4 + copy 2 + gradient 4 + moments 8, without
// masters 2 + 4 + 8; an fp32 one (bias, norm, fp32_layers) 4 + 4 + 8 in both.
std::string master_weights_note(const ParamStore& params, const PrecisionConfig& precision) {
  double copied = 0, plain = 0;
  for (const ParamInfo& p : params.params())
    if (p.trainable) (p.working != DType::f32 ? copied : plain) += double(p.size);
  const double n = copied + plain;
  if (n == 0) return "";
  const double with = 18 * copied + 16 * plain, without = 14 * copied + 16 * plain;
  std::ostringstream s;
  s << std::fixed << std::setprecision(2);
  s << "  bytes per parameter (precision.master_weights; one rank, no ZeRO): a 16-bit weight matrix's 18 with fp32 "
       "masters (master 4 + copy 2 + gradient 4 + moments 8), 14 without; biases, norms and fp32 layers 16 in both\n"
    << "    this net: " << std::setprecision(0) << copied << " of " << n << " trainable parameters have a 16-bit copy; "
    << std::setprecision(2) << with / n << " bytes per parameter with masters (" << mib(with) << "), " << without / n
    << " without (" << mib(without) << "); this run: " << enum_name(precision.master_weights);
  if (precision.master_weights == MasterWeights::none) s << ", weight_rounding " << enum_name(precision.weight_rounding);
  s << "\n";
  return s.str();
}
}  // namespace

void describe_run(const RunConfig& c, Backend& be, data::ShardSet& shards, std::ostream& out) {
  const data::SetInfo s = data::cropped_input(shards.info(), c.data.clip_seconds);
  const int pp = c.parallel.pp;
  const StagePlan plan = plan_stages(c, be, s, pp);
  const PrecisionPolicy policy(c.precision);
  const Recompute recompute = c.train.recompute;
  // The stage's training state as a run of this layout builds it: under parallel.zero 1 with --dp,
  // the part of the stage's rank 0 of dp x cp (and, in fp16/bf16, of the masters).
  DistributedOptimizer optimizer(be, distributed_optimizer_config(c));
  ParamStore& params = optimizer.params();
  AVNet net(be, params, c.model, s, policy, {}, recompute);
  optimizer.build(c.parallel.dp < 1 ? 1 : c.parallel.dp * c.parallel.cp, 0, nullptr);

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
  // and, for comparison, in fp32; each recompute setting's, for the table and the GPU's fit.
  const int B = c.train.micro_batch;
  std::map<Recompute, NetMemory> measured;
  const double state_per_param = params.total_size() ? optimizer.bytes() / double(params.total_size()) : 0;
  measured[recompute] = measure_net(c, be, s, recompute, state_per_param);
  const MicroBatchMemory memory = measured[recompute].micro_batch.at(B);
  const std::vector<std::size_t>& act = memory.layers;
  const double workspace = double(memory.workspace);
  AdamW& adamw = optimizer.adamw();
  const double p4 = double(params.total_size()) * 4,
               moments = double(adamw.first_moments().bytes() + adamw.second_moments().bytes());
  const char* mode = dtype_name(policy.compute());
  out << "precision: " << mode << ", products on " << be.gemm_engine(policy.compute()) << "\n";
  out << "memory estimate (" << mode << ", one rank holding the whole net):\n"
      << "  parameters        " << mib(double(params.masters().bytes()))
      << (params.masterless() ? " (no fp32 masters: precision.master_weights none)"
                              : params.masters_split() ? " (fp32 masters, this replica's part)" : " (fp32 masters)")
      << "\n";
  if (params.values_packed())
    out << "  fp32 values       " << mib(double(params.values().bytes()))
        << " (the parameters without a 16-bit working copy, whole)\n";
  out << "  working copies    " << mib(double(params.working_bytes()))
      << (params.masterless() ? " (the bf16 weights themselves)" : "") << "\n"
      << "  gradients         " << mib(p4) << "\n"
      << "  optimizer (AdamW) " << mib(moments) << zero_note(c) << "\n"
      << "  activations       " << mib(double(memory.kept())) << " per micro-batch of " << B << " (train.recompute "
      << enum_name(recompute) << ")\n";
  if (policy.compute() != DType::f32) {
    const std::size_t act32 =
        measure_micro_batches(c.model, s, PrecisionConfig{}, Recompute::none, c.train.seed).at(B).kept();
    std::ostringstream ratio;
    ratio << std::fixed << std::setprecision(3) << double(memory.kept()) / double(act32);
    out << "                    (fp32: " << mib(double(act32)) << "; ratio " << ratio.str() << ")\n";
  }
  const double parameter_bytes = optimizer.bytes();
  out << "  workspace         " << mib(workspace) << " (fp32 scratch shared by the layers)\n"
      << "  total             " << mib(parameter_bytes + double(memory.kept()) + workspace) << "\n";
  if (params.working_bytes()) out << master_weights_note(params, c.precision);

  // What each recompute setting keeps, measured the same way, against what this process has for tensors.
  const double available = double(be.memory_for_tensors());
  out << "\nactivation recomputation (train.recompute; every setting gives the same results), one micro-batch of " << B
      << ",\nthe whole net on one rank, against " << mib(available) << " for tensors here:\n";
  out << "  " << std::left << std::setw(12) << "setting" << std::right << std::setw(18) << "activations" << std::setw(18)
      << "workspace" << std::setw(18) << "total" << "\n";
  for (const Recompute r : {Recompute::none, Recompute::attention, Recompute::blocks}) {
    if (!measured.count(r)) measured[r] = measure_net(c, be, s, r, state_per_param);
    const MicroBatchMemory m = measured[r].micro_batch.at(B);
    const double total_r = parameter_bytes + double(m.kept()) + double(m.workspace);
    out << "  " << std::left << std::setw(12) << enum_name(r) << std::right << std::setw(18)
        << mib(double(m.kept())) << std::setw(18) << mib(double(m.workspace)) << std::setw(18) << mib(total_r)
        << "  " << (total_r <= available ? "fits" : "does not fit") << (r == recompute ? "  (this run)" : "") << "\n";
  }

  // The pipeline cut: each stage with its share of the work and, under the schedule, of memory.
  const parallel::Schedule schedule = c.parallel.schedule;
  const int M = c.train.micro_batches;
  out << "\npipeline: " << pp << " stage(s), partition " << c.parallel.partition << ", schedule "
      << enum_name(schedule) << ", " << M << " micro-batch(es) per step; ideal bubble "
      << std::fixed << std::setprecision(3) << parallel::ideal_bubble(pp, M) << "\n";
  if (const int cp = c.parallel.cp; cp > 1) {
    const TokenParts part = TokenParts::of(g, cp, 0);
    out << "context parallelism: cp " << cp << ": each sample's " << g.tokens << " tokens cut over " << cp
        << " ranks (" << part.tokens() << " slots a rank: " << part.audio_slots << " audio + " << part.video_slots
        << " video), " << c.model.heads / cp << " of " << c.model.heads
        << " heads a rank in attention over all " << part.gathered_tokens()
        << " (Ulysses all-to-all); ranks pp x dp x cp, cp innermost; "
        << "a stage's dp x cp ranks share its gradients (and, under parallel.zero 1, its optimizer state)\n";
    // What one rank keeps at each cp that divides the heads (the whole net on one stage), measured
    // as above: the parts' share of the tokens, attention's of the heads.
    out << "activations a rank keeps, one micro-batch of " << B << " (train.recompute " << enum_name(recompute)
        << "), by parallel.cp:\n";
    double at_one = 0;
    for (int parts = 1; parts <= c.model.heads && parts <= g.tokens; parts *= 2) {
      if (c.model.heads % parts) continue;
      const double kept =
          double(measure_micro_batches(c.model, s, c.precision, recompute, c.train.seed, parts).at(B).kept());
      if (parts == 1) at_one = kept;
      std::ostringstream ratio;
      ratio << std::fixed << std::setprecision(3) << kept / at_one;
      out << "  cp " << std::left << std::setw(4) << parts << std::right << std::setw(18) << mib(kept) << "  ("
          << ratio.str() << " of cp 1)" << (parts == cp ? "  (this run)" : "") << "\n";
    }
  }
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

  describe_device_fit(c, be, shards.info(), measured, out);
}

}  // namespace avtrain
