#include "train/device_fit.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <optional>
#include <sstream>

#include "core/enum_names.hpp"
#include "core/error.hpp"
#include "data/augment.hpp"
#include "model/av_net.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "precision/precision_policy.hpp"
#include "train/stage_plan.hpp"

namespace avtrain {

namespace {

std::string gib(double bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << bytes / double(1ull << 30) << " GiB";
  return s.str();
}

double largest(const std::vector<RankMemory>& ranks) {
  double m = 0;
  for (const RankMemory& r : ranks) m = std::max(m, r.total());
  return m;
}

// The partition a layout of pp stages takes: the run's own, or by parameters where it names the
// first layers of the run's own number of stages.
std::string partition_for(const RunConfig& c, int pp) {
  const std::string& p = c.parallel.partition;
  return pp == c.parallel.pp || p == "params" || p == "uniform" ? p : "params";
}

// A single setting that makes every rank fit, with what the largest rank then holds.
struct Remedy {
  std::string setting;
  double largest_rank = 0;
};

// The state's bytes a parameter: what the net at the run's input holds over its parameters.
double state_per_param(const NetMemory& m, Backend& be, const RunConfig& c, const data::SetInfo& input) {
  ParamStore params;
  AVNet net(be, params, c.model, input, PrecisionPolicy(c.precision));
  return params.total_size() ? m.state_bytes / double(params.total_size()) : 0;
}

}  // namespace

NetMemory measure_net(const RunConfig& c, Backend& be, const data::SetInfo& input, Recompute r,
                      double state_per_param) {
  NetMemory m;
  ParamStore params;  // registered, not allocated: the parameters' count
  AVNet net(be, params, c.model, input, PrecisionPolicy(c.precision));
  m.state_bytes = state_per_param * double(params.total_size());
  m.layers = plan_stages(c, be, input, 1).layers;
  m.micro_batch = measure_micro_batches(c.model, input, c.precision, r, c.train.seed, c.parallel.cp);
  return m;
}

std::vector<RankMemory> rank_memory(const RunConfig& c, const NetMemory& m, int pp, int B) {
  const std::vector<parallel::StageRange> stages = parallel::partition_stages(m.layers, pp, partition_for(c, pp));
  const MicroBatchMemory mb = m.micro_batch.at(B);
  std::size_t all_params = 0;
  for (const parallel::LayerCost& l : m.layers) all_params += l.params;
  std::vector<RankMemory> ranks;
  for (int st = 0; st < pp; ++st) {
    RankMemory r;
    std::size_t params = 0;
    double kept = 0;
    for (int i = stages[st].first; i < stages[st].last; ++i) params += m.layers[i].params, kept += double(mb.layers[i]);
    // Every per-parameter buffer (master, working copy, gradient, moments) splits with the parameters.
    r.state = all_params ? m.state_bytes * double(params) / double(all_params) : 0;
    r.in_flight = parallel::max_in_flight(c.parallel.schedule, pp, st, c.train.micro_batches);
    r.activations = kept * r.in_flight;
    r.workspace = double(mb.workspace);  // the whole net's: what the stage's layers share, at most
    ranks.push_back(r);
  }
  return ranks;
}

double device_bytes_for_tensors(const RunConfig& c) {
  if (c.device.arena_mb > 0) return c.device.arena_mb * double(1 << 20);
  return 0.9 * c.dry_run.device_memory_gb * double(1ull << 30);
}

void describe_device_fit(const RunConfig& c, Backend& be, const data::SetInfo& stored,
                         const std::map<Recompute, NetMemory>& measured, std::ostream& out) {
  const double available = device_bytes_for_tensors(c);
  const int pp = c.parallel.pp, dp = c.parallel.dp, cp = c.parallel.cp;
  const int B = c.train.micro_batch, M = c.train.micro_batches;
  const Recompute recompute = c.train.recompute;
  const NetMemory& m = measured.at(recompute);
  const std::vector<RankMemory> ranks = rank_memory(c, m, pp, B);

  std::ostringstream gpu;  // as given: 80, 141, 0.5
  gpu << c.dry_run.device_memory_gb;
  out << "\non --device cuda, one GPU a rank of " << gpu.str() << " GiB (dry-run.device_memory_gb): " << gib(available) << " for tensors ("
      << (c.device.arena_mb > 0 ? "device.arena_mb" : "the arena's 90 %") << "), each rank:\n";
  out << "  " << std::left << std::setw(7) << "stage" << std::setw(14) << "ranks" << std::right << std::setw(14)
      << "state" << std::setw(22) << "activations" << std::setw(13) << "workspace" << std::setw(14) << "total" << "\n";
  bool fits = true;
  for (int st = 0; st < pp; ++st) {
    const RankMemory& r = ranks[st];
    std::string who = "replicas";
    const int n = dp * cp;  // the stage's ranks
    if (dp > 0) who = n == 1 ? std::to_string(st) : std::to_string(st * n) + ".." + std::to_string(st * n + n - 1);
    const bool ok = r.total() <= available;
    fits = fits && ok;
    out << "  " << std::left << std::setw(7) << st << std::setw(14) << who << std::right << std::setw(14)
        << gib(r.state) << std::setw(22) << gib(r.activations) + " (x" + std::to_string(r.in_flight) + ")"
        << std::setw(13) << gib(r.workspace) << std::setw(14) << gib(r.total()) << "  "
        << (ok ? "fits" : "does not fit") << "\n";
  }
  out << "  (state: parameters, working copies, gradients, optimizer; activations: a micro-batch of " << B
      << " kept for backward, times the micro-batches the schedule holds at once; measured on the CPU backend's "
         "tensors, the unfused path)\n";
  if (fits) {
    out << "fits: every rank holds at most " << gib(largest(ranks)) << " of " << gib(available) << "\n";
    return;
  }

  // Each setting alone, the others as the run has them.
  std::vector<Remedy> remedies;
  for (const Recompute r : {Recompute::attention, Recompute::blocks}) {
    if (int(r) <= int(recompute)) continue;
    const double need = largest(rank_memory(c, measured.at(r), pp, B));
    if (need <= available) {
      remedies.push_back({"train.recompute " + std::string(enum_name(r)), need});
      break;
    }
  }
  for (int b = B - 1; b >= 1; --b) {
    const double need = largest(rank_memory(c, m, pp, b));
    if (need > available) continue;
    const int keep = (B * M + b - 1) / b;  // micro-batches that keep the global batch at least as large
    remedies.push_back({"train.micro_batch " + std::to_string(b) + " (with train.micro_batches " + std::to_string(keep) +
                            ": " + std::to_string(b * keep) + " samples a replica's step, against " +
                            std::to_string(B * M) + ")",
                        need});
    break;
  }
  for (int p = pp + 1; p <= int(m.layers.size()); ++p) {
    const double need = largest(rank_memory(c, m, p, B));
    if (need > available) continue;
    remedies.push_back({"--pp " + std::to_string(p) + " (" + std::to_string(p * std::max(1, dp) * cp) + " ranks)", need});
    break;
  }
  // The clip: the longest that fits, in whole seconds (a clip of 4 s or more) or whole tubelets of
  // frames, found by bisection (memory grows with the clip); each length measured as the run would
  // build it (its positional embeddings follow the tokens).
  const data::SetInfo input = data::cropped_input(stored, c.data.clip_seconds);
  const int tubelet = std::max(1, c.model.tubelet_frames);
  const int whole_second = int(std::lround(stored.fps));
  const int grain = whole_second >= tubelet && input.frames >= 4 * whole_second ? whole_second : tubelet;
  const double per_param = state_per_param(m, be, c, input);
  const auto need_at = [&](int frames) {
    const data::SetInfo cut = data::cropped_input(stored, double(frames) / stored.fps);
    return largest(rank_memory(c, measure_net(c, be, cut, recompute, per_param), pp, B));
  };
  int lo = 0, hi = (input.frames - 1) / grain + 1;  // grains: lo fits (0: none known), hi does not
  std::optional<double> need_lo;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    const double need = need_at(mid * grain);
    if (need <= available) lo = mid, need_lo = need;
    else hi = mid;
  }
  if (lo > 0 && need_lo) {
    std::ostringstream s;
    s << "data.clip_seconds " << double(lo * grain) / stored.fps << " (" << lo * grain << " of " << input.frames
      << " frames)";
    remedies.push_back({s.str(), *need_lo});
  }
  // parallel.cp: the fewest parts (a power of two dividing the heads) that fit, each rank keeping its
  // share of the tokens and of attention's heads.
  const int tokens = TokenGeometry::of(c.model, input).tokens;
  for (int parts = 2 * cp; parts <= c.model.heads && parts <= tokens; parts *= 2) {
    if (c.model.heads % parts) continue;
    RunConfig wider = c;
    wider.parallel.cp = parts;
    const double need = largest(rank_memory(wider, measure_net(wider, be, input, recompute, per_param), pp, B));
    if (need > available) continue;
    remedies.push_back({"--cp " + std::to_string(parts) + " (" + std::to_string(pp * std::max(1, dp) * parts) +
                            " ranks: each sample's tokens over " + std::to_string(parts) + ")",
                        need});
    break;
  }

  out << "does not fit: the largest rank holds " << gib(largest(ranks)) << " of " << gib(available) << "\n";
  if (remedies.empty()) {
    out << "no single setting of train.recompute, train.micro_batch, --pp, data.clip_seconds or --cp makes it fit; "
           "combine them, or a GPU with more memory\n";
    return;
  }
  out << "what makes it fit, each alone (the largest rank then):\n";
  for (const Remedy& r : remedies) out << "  " << r.setting << ": " << gib(r.largest_rank) << " a rank\n";
}

}  // namespace avtrain
