// avtrain: the MPI-launched training program. Parses options, opens the shard set, builds the
// backend and the model, and trains or describes. Only here do errors become exits.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <thread>
#include <iomanip>
#include <iostream>

#include "app/backend_choice.hpp"
#include "app/options.hpp"
#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/exit_status_file.hpp"
#include "core/stop_signals.hpp"
#include "data/shard_set.hpp"
#include "parallel/process_groups.hpp"
#include "train/run_description.hpp"
#include "train/trainer.hpp"

namespace {

[[noreturn]] void abort_world(int world) {
  std::fflush(stderr);
  std::fflush(stdout);
  if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
  std::exit(1);
}

// An error met during training: the rank that met it prints it and aborts the world; a rank that
// learnt of it from the others (ErrorElsewhere) gives that rank the time to print first.
[[noreturn]] void stop_on_error(const std::exception& e, int rank, int world) {
  if (dynamic_cast<const avtrain::ErrorElsewhere*>(&e)) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
  } else {
    std::fprintf(stderr, "avtrain: rank %d: %s\n", rank, e.what());
  }
  avtrain::record_exit_status(avtrain::kExitFailed, rank);
  abort_world(world);
}

// Errors every rank meets alike (options, layout) are printed by rank 0 alone and every rank exits
// 1; an error on some ranks only is printed by the rank that met it, which then aborts the world.
int train(const avtrain::ParsedOptions& options, avtrain::parallel::ProcessGroups& groups) {
  const avtrain::RunConfig& config = options.config;
  const avtrain::parallel::Topology& topo = groups.topology;
  auto backend = avtrain::make_backend(config, topo);
  avtrain::reserve_device_memory(config, topo, *backend);
  avtrain::TensorMemoryScope tensors_on_the_backend(*backend);
  const std::string collectives = avtrain::use_device_collectives(config, groups, *backend);
  if (topo.rank == 0 && !collectives.empty()) std::cout << "[rank 0] collectives: " << collectives << std::endl;
  auto shards = avtrain::data::ShardSet::open(config.data.dir, {topo.rank, topo.world, config.data.check_values});
  avtrain::require_task_fits(config.model, shards->info(), config.data.dir);
  std::unique_ptr<avtrain::data::ShardSet> val_shards;
  if (!config.data.val_dir.empty()) {
    val_shards = avtrain::data::ShardSet::open(config.data.val_dir, {topo.rank, topo.world, config.data.check_values});
    avtrain::data::require_same_samples(shards->info(), config.data.dir, val_shards->info(), config.data.val_dir);
  }
  avtrain::Trainer trainer(config, *backend, *shards, val_shards.get(), groups);
  std::ostringstream quiet;
  if (config.eval_only) {
    trainer.evaluate_checkpoint(options.resolved, topo.rank == 0 ? std::cout : quiet);
    return 0;
  }
  avtrain::TrainSummary summary;
  try {
    summary = trainer.run(options.resolved, topo.rank == 0 ? std::cout : quiet);
  } catch (const std::exception& e) {
    // On a GPU, unwinding would wait: a transfer's Request for a peer that never receives, the
    // arena's cudaFree for NCCL kernels that never finish. Stop before the locals go.
    if (!backend->host_accessible()) stop_on_error(e, topo.rank, topo.world);
    throw;
  }
  if (!summary.stopped_early.empty()) {
    // Every rank stops alike; "resume me" only with a checkpoint to resume from.
    const int code = summary.checkpointed ? avtrain::kExitStoppedEarly : avtrain::kExitFailed;
    avtrain::record_exit_status(code, topo.rank);
    avtrain::exit_on_stop_signal(code);  // the launcher may end this rank when another exits first
    if (topo.rank == 0)
      std::cout << "[rank 0] stopped early after step " << summary.steps << " (" << summary.stopped_early << "): "
                << (summary.checkpointed ? "checkpoint committed; the same command resumes (exit 75)"
                                         : "no checkpoint written (no --out or checkpoint.dir, or checkpoint.interval -1)")
                << std::endl;
    return code;
  }
  if (topo.rank != 0) return 0;
  if (summary.step_ms.empty()) {
    std::cout << "[rank 0] done: the run was complete already (" << summary.steps << " steps)" << std::endl;
    return 0;
  }
  std::cout << std::fixed << std::setprecision(4) << "[rank 0] done: " << summary.steps << " steps, final loss " << summary.final_loss << ", val_acc "
            << summary.val_acc << ", median step " << summary.median_step_ms << " ms";
  if (summary.skipped) std::cout << ", " << summary.skipped << " step(s) skipped for non-finite gradients";
  std::cout << std::endl;
  if (!config.train.out.empty())
    std::cout << "[rank 0] traces: " << config.train.out << "/{run.json,trace.csv,layers.csv,ranks.csv}"
              << (config.train.tensorboard ? "; tensorboard --logdir " + config.train.out : std::string()) << std::endl;
  return 0;
}

void describe(const avtrain::RunConfig& config) {
  auto shards = avtrain::data::ShardSet::open(config.data.dir, {0, 1, config.data.check_values});
  avtrain::require_task_fits(config.model, shards->info(), config.data.dir);
  if (!config.data.val_dir.empty()) {  // refused here as the run would refuse it
    auto val_shards = avtrain::data::ShardSet::open(config.data.val_dir, {0, 1, config.data.check_values});
    avtrain::data::require_same_samples(shards->info(), config.data.dir, val_shards->info(), config.data.val_dir);
  }
  avtrain::RunConfig on_cpu = config;  // the description is computed on the CPU backend
  on_cpu.device = {};
  auto backend = avtrain::make_backend(on_cpu, {});
  avtrain::describe_run(config, *backend, *shards, std::cout);
}


}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  avtrain::install_stop_signals();  // after MPI_Init, which may install handlers of its own
  avtrain::ParsedOptions options;
  std::optional<avtrain::parallel::ProcessGroups> groups;
  try {
    options = avtrain::parse_options({argv + 1, argv + argc});
    if (options.help) {
      if (rank == 0) std::cout << *options.help;
      avtrain::record_exit_status(avtrain::kExitDone, rank);
      MPI_Finalize();
      return 0;
    }
    avtrain::require(!options.config.data.dir.empty(), "no shard set given: set data.dir in the deck or pass --data DIR");
    if (!options.config.dry_run.on)
      groups = avtrain::parallel::make_mpi_process_groups(options.config.parallel.pp, options.config.parallel.dp,
                                                             options.config.parallel.cp);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "avtrain: %s\n", e.what());
    avtrain::record_exit_status(avtrain::kExitFailed, rank);
    groups.reset();
    MPI_Finalize();
    return 1;
  }
  int code = avtrain::kExitDone;
  try {
    if (options.config.dry_run.on) {
      if (rank == 0) describe(options.config);
    } else {
      code = train(options, *groups);
    }
  } catch (const std::exception& e) {
    stop_on_error(e, rank, world);
  }
  avtrain::record_exit_status(code, rank);
  groups.reset();
  MPI_Finalize();
  return code;
}
