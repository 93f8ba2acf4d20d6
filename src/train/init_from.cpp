#include "train/init_from.hpp"

#include <chrono>
#include <iomanip>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/pretrained_weights.hpp"
#include "core/error.hpp"
#include "core/name_globs.hpp"
#include "io/safetensors_file.hpp"
#include "model/position_resize.hpp"

namespace avtrain {

void init_from_file(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world, Backend& be,
                    DistributedOptimizer& state, const TokenGeometry& geometry, std::ostream& log) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& path = config.model.init_from;
  NameGlobs skip(config.model.init_skip);
  std::optional<io::SafetensorsReader> file;
  checkpoint::PretrainedLoad got;
  std::string message;
  double failed = 0;
  try {
    file.emplace(path);
    ParamStore& params = state.params();
    std::vector<float> flat;
    params.draw_initial(flat, config.train.seed);
    got = checkpoint::load_pretrained(*file, skip, PositionLayout::of(geometry), params, flat);
    params.move_drawn_ulps(flat, config.train.init_ulps);  // the loaded weights' twin too
    params.load(flat);
    state.loaded(be);
  } catch (const Error& e) {
    message = std::string("model.init_from ") + e.what();
    failed = 1;
  }
  world.all_reduce(&failed, 1, parallel::ReduceOp::max);
  if (failed > 0) {
    if (message.empty()) throw ErrorElsewhere();
    throw Error(message);
  }

  // What every stage took, over the world: each tensor of the file and each glob, used anywhere;
  // the counts of each stage's first rank.
  const std::size_t n = file->tensors().size(), g = skip.globs().size();
  std::vector<double> flags(n + g + 2, 0.0);
  for (std::size_t i = 0; i < n; ++i) flags[i] = got.used[i];
  for (std::size_t i = 0; i < g; ++i) flags[n + i] = skip.used()[i];
  world.all_reduce(flags.data(), flags.size(), parallel::ReduceOp::max);
  const bool counts_once = topo.stage_rank() == 0;
  std::vector<double> counts = {counts_once ? double(got.loaded) : 0.0, counts_once ? double(got.skipped) : 0.0};
  world.all_reduce(counts.data(), counts.size(), parallel::ReduceOp::sum);
  for (std::size_t i = 0; i < g; ++i)
    require(flags[n + i] > 0, "model.init_skip: '" + skip.globs()[i] + "' matches no parameter of this model");
  if (topo.rank != 0) return;
  log << "[rank 0] model.init_from " << path << ": " << std::int64_t(counts[0]) << " tensors loaded";
  if (!skip.empty()) log << ", " << std::int64_t(counts[1]) << " left fresh (model.init_skip " << config.model.init_skip << ")";
  log << ", in " << std::setprecision(2) << std::fixed
      << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  // embed.pos is the first stage's, so rank 0 knows how it was fitted.
  if (!got.resized.empty())
    log << "[rank 0] model.init_from: " << kPositionalEmbedding << " interpolated from the file's clip length to this "
        << "run's: " << got.resized << "\n";
  std::string unused;
  int unused_count = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (flags[i] == 0) unused += (unused_count++ ? ", " : "") + file->tensors()[i].name;
  if (unused_count)
    log << "[rank 0] model.init_from: warning: " << unused_count << " tensor(s) of the file not used by this model: "
        << unused << "\n";
}

}  // namespace avtrain
