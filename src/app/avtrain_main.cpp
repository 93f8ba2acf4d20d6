// avtrain: the MPI-launched training program. Parses options, opens the shard set, builds the
// backend and the model, and trains or describes. Only here do errors become exits.
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/options.hpp"
#include "backend/backend.hpp"
#include "build_info.hpp"
#include "core/error.hpp"
#include "data/shard_set.hpp"
#include "train/trainer.hpp"

namespace {

nlohmann::json data_fingerprint(const avtrain::data::SetInfo& s) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& f : s.shards)
    shards.push_back({{"name", std::filesystem::path(f.path).filename().string()}, {"bytes", f.bytes}, {"samples", f.samples}});
  return {{"shards", shards},
          {"total_samples", s.total_samples},
          {"sample_rate", s.sample_rate},
          {"fps", s.fps},
          {"num_classes", s.num_classes},
          {"audio_samples", s.audio_samples},
          {"audio_type", s.audio_int16 ? "int16" : "float32"},
          {"video_shape", {s.frames, s.height, s.width, s.channels}}};
}

int run(int argc, char** argv, int rank, int world) {
  std::vector<std::string> args(argv + 1, argv + argc);
  avtrain::ParsedOptions options = avtrain::parse_options(args);
  if (options.help) {
    if (rank == 0) std::cout << *options.help;
    return 0;
  }
  const avtrain::RunConfig& config = options.config;
  avtrain::require(world == 1, "this version trains on one rank; mpirun started " + std::to_string(world) +
                                   " (pipeline and data parallelism come with the parallel runtime)");
  avtrain::require(!config.data.dir.empty(), "no shard set given: set data.dir in the deck or pass --data DIR");
  auto shards = avtrain::data::ShardSet::open(config.data.dir);
  auto backend = avtrain::make_cpu_backend();
  backend->set_threads(config.train.threads);
  avtrain::Trainer trainer(config, *backend, *shards);
  if (config.dry_run) {
    trainer.describe(std::cout);
    return 0;
  }
  nlohmann::json manifest;
  manifest["config"] = options.resolved;
  manifest["deck"] = config.deck;
  manifest["seed"] = config.train.seed;
  manifest["layout"] = {{"world_size", world}, {"pp", 1}, {"dp", 1}, {"device", backend->name()},
                        {"threads", config.train.threads}};
  manifest["build"] = {{"version", avtrain::build_info::version}, {"git_commit", avtrain::build_info::git_commit},
                       {"compiler", avtrain::build_info::compiler}, {"build_type", avtrain::build_info::build_type},
                       {"blas", avtrain::build_info::blas}};
  manifest["data"] = data_fingerprint(shards->info());
  manifest["data"]["dir"] = config.data.dir;
  auto summary = trainer.run(manifest, std::cout);
  std::cout << "done: " << summary.steps << " steps, final loss " << summary.final_loss << ", val_acc "
            << summary.val_acc << ", median step " << summary.median_step_ms << " ms";
  if (summary.skipped) std::cout << ", " << summary.skipped << " step(s) skipped for non-finite gradients";
  std::cout << std::endl;
  if (!config.train.out.empty()) std::cout << "traces: " << config.train.out << "/{run.json,trace.csv,layers.csv}" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int code = 0;
  try {
    code = run(argc, argv, rank, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "avtrain: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    code = 1;
  }
  MPI_Finalize();
  return code;
}
