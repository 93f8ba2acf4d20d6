// avtrain-bench: times training steps of a deck on a synthetic shard set of the quickstart shape,
// counts the model's matrix-product FLOPs per step, and measures this machine's large-sgemm rate,
// so a step can be read against its GEMM floor. Prints a table and one JSON line.
#include <mpi.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/gemm_rate.hpp"
#include "app/options.hpp"
#include "app/tool_main.hpp"
#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "core/error.hpp"
#include "data/shard_set.hpp"
#include "data/synthetic.hpp"
#include "parallel/process_groups.hpp"
#include "train/trainer.hpp"

namespace po = boost::program_options;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int run(int argc, char** argv) {
  std::string deck = "inputs/quickstart.ini", workdir, precision = "fp32";
  int warmup = 3, steps = 10, threads = 2;
  po::options_description opts("avtrain-bench [--deck DECK] [--precision fp32|fp16|bf16] [--warmup N] [--steps N] [--threads N]");
  opts.add_options()("help,h", "print this help")("deck", po::value(&deck)->default_value(deck), "model deck")(
      "precision", po::value(&precision)->default_value(precision), "precision.mode of the steps")(
      "warmup", po::value(&warmup)->default_value(warmup), "untimed steps first")(
      "steps", po::value(&steps)->default_value(steps), "timed steps")(
      "threads", po::value(&threads)->default_value(threads), "BLAS/OpenMP threads")(
      "workdir", po::value(&workdir), "where the synthetic shards go (default: a temporary directory)");
  if (!avtrain::parse_tool_options(opts, argc, argv)) return 0;
  avtrain::require(steps >= 1 && warmup >= 0, "--steps must be >= 1 and --warmup >= 0");

  avtrain::ParsedOptions parsed = avtrain::parse_options(
      {deck, "--train.threads", std::to_string(threads), "--precision.mode", precision,
       "--train.eval_interval", "0", "--train.log_interval", "0", "--data.val_fraction", "0"});
  avtrain::RunConfig config = parsed.config;
  config.train.out.clear();

  const bool own_dir = workdir.empty();
  if (own_dir) workdir = (std::filesystem::temp_directory_path() / ("avtrain-bench-" + std::to_string(::getpid()))).string();
  avtrain::data::SynthOptions synth;
  synth.out_dir = workdir;
  synth.shards = 1;
  synth.samples_per_shard = std::int64_t(config.global_batch(1)) * 4;
  avtrain::data::write_synthetic(synth);
  auto shards = avtrain::data::ShardSet::open(workdir);

  auto backend = avtrain::make_cpu_backend();
  backend->set_threads(threads);
  std::ostringstream quiet;
  avtrain::parallel::ProcessGroups groups = avtrain::parallel::make_mpi_process_groups(1, 1);
  avtrain::Trainer trainer(config, *backend, *shards, nullptr, groups);
  config.train.steps = warmup;
  trainer.run({}, quiet);

  // Shared machines drift by tens of percent within a minute, so the floor is measured in short
  // rounds beside the steps it is compared with: a 2048^3 rate, then a few steps, and again. The
  // first step of a round also starts the reader thread, so it is run but not timed.
  constexpr int kStepsPerRound = 5;
  std::vector<double> timed, ratios, rates;
  double flops = 0;
  for (int done = 0; done < steps; done += kStepsPerRound) {
    const double rate = avtrain::gemm_rate_gflops(*backend, avtrain::DType::f32, 2048, 3);
    config.train.steps = 1 + std::min(kStepsPerRound, steps - done);
    const double flops_before = backend->gemm_flops();
    const avtrain::TrainSummary round = trainer.run({}, quiet);
    const double flops_per_step = (backend->gemm_flops() - flops_before) / config.train.steps;
    flops = flops_per_step;
    rates.push_back(rate);
    for (double ms : std::vector<double>(round.step_ms.begin() + 1, round.step_ms.end())) {
      timed.push_back(ms);
      ratios.push_back(ms / (flops_per_step / (rate * 1e9) * 1e3));
    }
  }
  if (own_dir) std::filesystem::remove_all(workdir);
  const double flops_per_step = flops;
  const double rate = median(rates);
  const double step_ms = median(timed);
  const double best_ms = *std::min_element(timed.begin(), timed.end());
  const double floor_ms = flops_per_step / (rate * 1e9) * 1e3;
  const double ratio = median(ratios);
  const int samples = config.global_batch(1);
  std::printf("avtrain-bench: %s, %s, batch %d, %d threads, %d timed steps after %d warm-up\n", deck.c_str(),
              precision.c_str(), samples, threads, int(timed.size()), warmup);
  std::printf("  model GEMM FLOPs per step   %.3f GFLOP\n", flops_per_step / 1e9);
  std::printf("  large sgemm (2048^3)        %.1f GFLOP/s (median of %zu rounds)\n", rate, rates.size());
  std::printf("  GEMM floor                  %.1f ms\n", floor_ms);
  std::printf("  median step                 %.1f ms  (%.1f GFLOP/s, %.0f samples/s)\n", step_ms,
              flops_per_step / (step_ms * 1e6), samples / (step_ms / 1e3));
  std::printf("  best step                   %.1f ms\n", best_ms);
  std::printf("  step / floor                %.2f  (median over steps, each against its round's sgemm rate)\n", ratio);
  nlohmann::json j = {{"framework", "avtrain"},       {"precision", precision},          {"median_step_ms", step_ms}, {"best_step_ms", best_ms},
                      {"gemm_gflop_per_step", flops_per_step / 1e9}, {"sgemm_gflops", rate},
                      {"floor_ms", floor_ms},         {"floor_ratio", ratio},         {"threads", threads},           {"batch", samples},
                      {"steps", steps}};
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return avtrain::run_tool("avtrain-bench", argc, argv, run); }
