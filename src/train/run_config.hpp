#pragma once
// Everything a run is configured by: the deck's sections and their command-line twins.
#include <cstdint>
#include <string>

#include "core/enum_names.hpp"
#include "data/augment.hpp"
#include "data/sampler.hpp"
#include "data/shard_set.hpp"
#include "model/model_config.hpp"
#include "model/recompute.hpp"
#include "optim/distributed_optimizer.hpp"
#include "optim/optim_config.hpp"
#include "parallel/parallel_config.hpp"
#include "precision/precision_config.hpp"

namespace avtrain {

struct DataConfig {
  std::string dir;            // shard set directory
  double val_fraction = 0.1;  // held out by a seed-keyed split
  std::string val_dir;        // a shard set of its own for validation (then all of dir trains), or empty
  int prefetch_steps = 2;     // steps read ahead by the reader thread
  data::CheckValues check_values = data::CheckValues::sample;  // what a start reads of the values
  double clip_seconds = 0;    // clips cut to this length (training: a random window; validation: centred); 0: as stored
  int reader_threads = 0;     // reader threads per rank; 0 until options derive it (app/reader_threads.hpp)
  data::Sampling sampling = data::Sampling::uniform;  // each epoch: a shuffle, or draws by class-balanced weight
};

struct TrainConfig {
  int steps = 300;
  int micro_batch = 32;       // samples per micro-batch
  int micro_batches = 1;      // micro-batches per step and replica; gradients accumulate
  Recompute recompute = Recompute::none;  // what blocks keep for backward: none | attention | blocks (model/recompute.hpp)
  std::uint64_t seed = 1;
  int eval_interval = 50;     // steps between validation passes; 0: only after the last step
  int log_interval = 10;      // steps between progress lines
  bool tensorboard = true;    // rank 0 writes TensorBoard event files beside trace.csv (with --out)
  int init_ulps = 0;          // every drawn initial weight moved this many ulps up: an FP32 run's twin for the noise band
  int threads = 2;            // BLAS / OpenMP threads per rank
  std::string out;            // trace directory; empty writes none
  double max_minutes = 0;     // wall-time budget: stop with a checkpoint before it runs out; 0: none
};

// Checkpoints (docs/checkpoint.md): when to write them, where, how many to keep.
// checkpoint.zero_write: under ZeRO, each replica writes its part (parallel), or the stage's first
// replica gathers the parts and writes the stage whole (gathered).
enum class ZeroWrite { parallel, gathered };
constexpr EnumNames<ZeroWrite, 2> enum_names(ZeroWrite) {
  return {{{ZeroWrite::parallel, "parallel"}, {ZeroWrite::gathered, "gathered"}}};
}

struct CheckpointConfig {
  int interval = 0;           // steps between checkpoints; 0: none but the last step's; -1: none written
  double minutes = 30;        // wall-time minutes between checkpoints; 0: off
  int keep = 2;               // committed checkpoints kept (an older one goes after a newer one is committed)
  std::string dir;            // default OUT/checkpoints
  ZeroWrite zero_write = ZeroWrite::parallel;
};

// Faults a test injects on purpose, to check that every rank sees them.
struct DebugConfig {
  std::string inject_overflow;  // "RANK:STEP": an inf in that rank's gradients at that step
  std::string perturb_weights;  // "RANK:STEP": that rank's first weight moved after that step's update
  std::string stall_reader;     // "RANK:STEP": that rank's data for that step never arrives (the watchdog's test)
  std::string hold_checkpoint;  // "POINT:STEP": the write of checkpoint step-STEP stops at POINT for good (the kill test)
  double watchdog_s = -1;       // seconds without progress before a rank aborts the job; -1: automatic; 0: off
  bool stage_comm = false;      // cpu: collectives staged through host copies made late, as --comm mpi on cuda
  std::string fp8_freeze_scale; // MODULE: that FP8 linear's scales never follow its amaxes (stay at the first, 1)
};

// device.backend: where a rank computes.
enum class DeviceBackend { cpu, cuda };
constexpr EnumNames<DeviceBackend, 2> enum_names(DeviceBackend) {
  return {{{DeviceBackend::cpu, "cpu"}, {DeviceBackend::cuda, "cuda"}}};
}

// device.comm: what the data-parallel and pipeline collectives go through.
enum class DeviceComm { automatic, mpi, nccl };
constexpr EnumNames<DeviceComm, 3> enum_names(DeviceComm) {
  return {{{DeviceComm::automatic, "auto"}, {DeviceComm::mpi, "mpi"}, {DeviceComm::nccl, "nccl"}}};
}

// device.attention: the engine of the fused attention (device.fused 1): auto (cuDNN's SDPA where libcudnn
// loads and takes the shape, else the own flash kernel), cudnn (or an error), own.
enum class AttentionEngine { automatic, cudnn, own };
constexpr EnumNames<AttentionEngine, 3> enum_names(AttentionEngine) {
  return {{{AttentionEngine::automatic, "auto"}, {AttentionEngine::cudnn, "cudnn"}, {AttentionEngine::own, "own"}}};
}

// Which backend a rank runs on, and what its collectives go through.
struct DeviceConfig {
  DeviceBackend backend = DeviceBackend::cpu;
  DeviceComm comm = DeviceComm::automatic;  // auto: nccl on cuda, mpi on cpu
  bool allow_tf32 = false;      // cuda: fp32 products on TF32 tensor cores (fp32 is then no longer a true baseline)
  bool fused = false;           // cuda: fused kernels (attention without its L x L probabilities in memory)
  AttentionEngine attention = AttentionEngine::automatic;  // cuda, fused: cuDNN's SDPA or the own flash kernel
  double arena_mb = 0;          // cuda: the tensor arena taken at start; 0: 90 % of the GPU's free memory
};

// --dry-run: print the layers, the memory of every setting and the job's fit on a GPU, then exit.
struct DryRunConfig {
  bool on = false;
  double device_memory_gb = 80;  // GiB of one GPU that the job is sized for (dry-run.device_memory_gb)
};

struct RunConfig {
  std::string deck;           // the input deck read, if any
  ModelConfig model;
  OptimConfig optim;
  PrecisionConfig precision;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  DeviceConfig device;
  DebugConfig debug;
  CheckpointConfig checkpoint;
  data::AugmentConfig augment;  // [augment]: training-time augmentation, all off by default
  std::string resume = "auto";  // auto: the newest committed checkpoint, if any; none; or a checkpoint directory
  bool overwrite = false;       // a fresh run may replace the traces already in --out
  bool eval_only = false;       // evaluate the checkpoint --resume names on the validation split, then exit
  DryRunConfig dry_run;
  // Samples per optimizer step over all replicas: dp x micro_batch x micro_batches.
  int global_batch(int dp) const { return dp * train.micro_batch * train.micro_batches; }
};

// What a stage's distributed optimizer is built from: the one reading of the run's options, which
// the run and the dry run share.
DistributedOptimizerConfig distributed_optimizer_config(const RunConfig& c);

}  // namespace avtrain
