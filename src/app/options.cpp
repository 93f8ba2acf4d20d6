#include "app/options.hpp"

#include <boost/program_options.hpp>
#include <fstream>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <type_traits>

#include "core/enum_names.hpp"
#include "app/reader_threads.hpp"
#include "core/error.hpp"

namespace po = boost::program_options;

namespace avtrain {

namespace {

// One table binds each option to its field, its section of --help and its run.json entry.
// The values an option accepts, and how the error message says so.
template <class T>
struct Range {
  T low, high;
  const char* text;
};

constexpr int kIntMax = std::numeric_limits<int>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Range<int> kAtLeast0{0, kIntMax, ">= 0"};
constexpr Range<int> kAtLeast1{1, kIntMax, ">= 1"};
constexpr Range<double> kNonNegative{0.0, kInf, ">= 0"};
constexpr Range<double> kPositive{std::numeric_limits<double>::denorm_min(), kInf, "> 0"};
const Range<double> kUnitInterval{0.0, std::nextafter(1.0, 0.0), "in [0, 1)"};

// An enum with a table of words (core/enum_names.hpp): an option of fixed choices.
template <class T>
concept NamedEnum = is_named_enum_v<T>;

class OptionTable {
 public:
  // Binds an option to its field, its section of --help and its run.json entry. A short form, where
  // one is given, is declared here and nowhere else: the command-line word that stands for the option
  // (--steps for train.steps; a bool's sets it to 1), listed by --help under General.
  template <class T>
  void add(const std::string& section, const std::string& key, T* field, const std::string& help,
           const char* short_form = nullptr) {
    std::ostringstream shown;  // 0.1, not 0.10000000000000001
    shown << *field;
    describe_(section, key, po::value<T>(field)->default_value(*field, shown.str()), help, short_form);
    if (short_form) add_short_form_(key, short_form, field);
    dump_.push_back([key, field](nlohmann::json& j) { j[key] = *field; });
  }

  // The same, with the range check that stops a run before any work when the value is outside it.
  template <class T>
  void add(const std::string& section, const std::string& key, T* field, const std::string& help,
           const Range<T>& range, const char* short_form = nullptr) {
    add(section, key, field, help, short_form);
    checks_.push_back([key, field, range] {
      if (*field >= range.low && *field <= range.high) return;
      std::ostringstream s;
      s << "option " << key << " = " << *field << ": must be " << range.text;
      throw Error(s.str());
    });
  }

  // A fixed choice: the words of the enum's table (core/enum_names.hpp) are what the option accepts,
  // what --help and the error list, and what run.json shows. The word is read into the field at check().
  template <NamedEnum T>
  void add(const std::string& section, const std::string& key, T* field, const std::string& help,
           const char* short_form = nullptr) {
    auto word = words_.emplace_back(std::make_shared<std::string>(enum_name(*field)));
    describe_(section, key, po::value<std::string>(word.get())->default_value(*word),
              help + "; one of " + enum_words<T>(), short_form);
    if (short_form) add_short_form_(key, short_form, word.get());
    checks_.push_back([key, field, word] {
      const std::optional<T> value = parse_enum<T>(*word);
      if (!value) throw Error("option " + key + " = " + *word + ": must be one of " + enum_words<T>());
      *field = *value;
    });
    dump_.push_back([key, field](nlohmann::json& j) { j[key] = enum_name(*field); });
  }

  // precision.loss_scale: a word, or a fixed scale.
  void add(const std::string& section, const std::string& key, LossScale* field, const std::string& help) {
    auto text = words_.emplace_back(std::make_shared<std::string>(field->text()));
    describe_(section, key, po::value<std::string>(text.get())->default_value(*text), help, nullptr);
    checks_.push_back([key, field, text] {
      const std::optional<LossScale> value = LossScale::parse(*text);
      if (!value)
        throw Error(key + ": '" + *text + "' is not " + enum_words<LossScale::Kind>() + " or a positive number");
      *field = *value;
    });
    dump_.push_back([key, field](nlohmann::json& j) { j[key] = field->text(); });
  }

  // Reads the fixed choices into their fields, and checks every range.
  void check() const {
    for (const auto& c : checks_) c();
  }

  std::vector<po::options_description*> sections() {
    std::vector<po::options_description*> out;
    for (auto& [name, s] : sections_) out.push_back(s.get());
    return out;
  }
  void dump(nlohmann::json& j) const {
    for (const auto& f : dump_) f(j);
  }

  // Short forms: as options of `general`; a short form and its dotted key both on the command line
  // (ambiguous) refused; the short forms given copied to their options. They are copied after the
  // deck is read, so a short form wins over the deck as any command-line option does.
  void add_short_forms(po::options_description& general) const {
    for (const ShortForm& s : short_forms_) s.describe(general);
  }
  void refuse_doubles(const po::variables_map& vm) const {
    for (const ShortForm& s : short_forms_)
      if (given(vm, s.name) && vm.count(s.key) && !vm[s.key].defaulted())
        throw Error("command line: --" + s.name + " and --" + s.key + " both given; use one");
  }
  void apply_short_forms(const po::variables_map& vm) const {
    for (const ShortForm& s : short_forms_)
      if (given(vm, s.name)) s.apply();
  }

 private:
  struct ShortForm {
    std::string name, key;
    std::function<void(po::options_description&)> describe;
    std::function<void()> apply;
  };

  static bool given(const po::variables_map& vm, const std::string& name) {
    return vm.count(name) && !vm[name].defaulted();
  }

  void describe_(const std::string& section, const std::string& key, const po::value_semantic* value,
                 const std::string& help, const char* short_form) {
    const std::string text = short_form ? help + "; short form --" + short_form : help;
    section_(section).add_options()(key.c_str(), value, text.c_str());
  }

  // The short form writes into a value of its own; apply() copies it to `target`.
  template <class T>
  void add_short_form_(const std::string& key, const std::string& name, T* target) {
    auto value = std::make_shared<T>();
    ShortForm s{name, key, {}, [target, value] { *target = *value; }};
    if constexpr (std::is_same_v<T, bool>)
      s.describe = [name, key, value](po::options_description& d) {
        d.add_options()(name.c_str(), po::bool_switch(value.get()), ("= --" + key + " 1").c_str());
      };
    else
      s.describe = [name, key, value](po::options_description& d) {
        d.add_options()(name.c_str(), po::value<T>(value.get()), ("= --" + key).c_str());
      };
    short_forms_.push_back(std::move(s));
  }

  po::options_description& section_(const std::string& name) {
    for (auto& [caption, s] : sections_)
      if (caption == name) return *s;
    sections_.emplace_back(name, std::make_unique<po::options_description>(name));
    return *sections_.back().second;
  }
  std::vector<std::pair<std::string, std::unique_ptr<po::options_description>>> sections_;
  std::vector<std::function<void(nlohmann::json&)>> dump_;
  std::vector<std::function<void()>> checks_;
  std::vector<std::shared_ptr<std::string>> words_;  // what the command line and deck say of a fixed choice
  std::vector<ShortForm> short_forms_;
};

// Boost.Program_options 1.74 writes an error message from a template, replacing its tokens (%value%,
// ...) until none is left, so a word that holds one (`--model.width %value%`) makes it loop forever
// (docs/fuzzing.md): such a word is refused before Boost reads it. `where`: the word's place.
void refuse_boost_template_tokens(const std::string& text, const std::string& where) {
  for (const char* p : {"%canonical_option%", "%option%", "%value%", "%original_token%", "%prefix%"})
    if (text.find(p) != std::string::npos)
      throw Error(where + ": holds \"" + p + "\", which the option parser (Boost.Program_options) cannot report; "
                  "refused");
}

// Whether TEXT is UTF-8, as JSON text must be (nlohmann::json's dump refuses anything else).
bool is_utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

void bind(OptionTable& t, RunConfig& c) {
  t.add("[data] shard set", "data.dir", &c.data.dir, "directory of HDF5 shards (format v1)", "data");
  t.add("[data] shard set", "data.val_fraction", &c.data.val_fraction, "share of samples held out for validation",
        kUnitInterval);
  t.add("[data] shard set", "data.val_dir", &c.data.val_dir,
        "a shard set of its own for validation (held-out speakers, sources...); all of data.dir then trains");
  t.add("[data] shard set", "data.prefetch_steps", &c.data.prefetch_steps, "steps read ahead by the reader thread",
        kAtLeast0);
  t.add("[data] shard set", "data.check_values", &c.data.check_values,
        "what a start reads of the values: sample (lengths and labels whole, float32 audio in a few rows of each shard; "
        "every value is checked as it is read for training) or full (every value, and the shards' digests, at the start)");
  t.add("[data] shard set", "data.clip_seconds", &c.data.clip_seconds,
        "cut each clip to this many seconds, audio and frames aligned (training: a window at a random start "
        "keyed by seed, epoch and sample; validation: the centred window); the model's input shapes follow; "
        "0: the stored length", kNonNegative);
  t.add("[data] shard set", "data.reader_threads", &c.data.reader_threads,
        "reader threads per rank, each reading whole micro-batches (HDF5 calls one at a time, the decompression "
        "at once); not given (shown as 0): the cores a rank may use minus train.threads on a CPU run, at least 1",
        Range<int>{1, 1024, "in [1, 1024]"});
  t.add("[data] shard set", "data.sampling", &c.data.sampling,
        "uniform: each epoch a shuffle of the training split; balanced: each epoch's samples drawn with replacement, "
        "a sample's weight the sum over its classes of 1000 / (the class's training samples + 0.01) (AST's "
        "sampler), keyed by seed and epoch");

  t.add("[model] AVNet architecture", "model.width", &c.model.width, "token width D",
        kAtLeast1);
  t.add("[model] AVNet architecture", "model.depth", &c.model.depth, "transformer blocks",
        kAtLeast0);
  t.add("[model] AVNet architecture", "model.heads", &c.model.heads, "attention heads (divide model.width)",
        kAtLeast1);
  t.add("[model] AVNet architecture", "model.mlp_ratio", &c.model.mlp_ratio, "MLP hidden width / D",
        kAtLeast1);
  t.add("[model] AVNet architecture", "model.audio_window", &c.model.audio_window, "audio frame length (samples)",
        Range<int>{2, kIntMax, ">= 2"});
  t.add("[model] AVNet architecture", "model.audio_hop", &c.model.audio_hop, "audio frame hop (samples)",
        kAtLeast1);
  t.add("[model] AVNet architecture", "model.mel_bins", &c.model.mel_bins, "mel filters (HTK formula)",
        kAtLeast1);
  t.add("[model] AVNet architecture", "model.tubelet_frames", &c.model.tubelet_frames, "video frames per tubelet",
        kAtLeast1);
  t.add("[model] AVNet architecture", "model.patch", &c.model.patch, "tubelet height and width (pixels)",
        kAtLeast1);
  t.add("[model] AVNet architecture", "model.nce_temperature", &c.model.nce_temperature, "InfoNCE temperature",
        kPositive);
  t.add("[model] AVNet architecture", "model.ce_weight", &c.model.ce_weight,
        "weight of the classification term (the training loss is ce_weight * CE + nce_weight * InfoNCE; CE is "
        "the binary cross-entropy under model.task multi_label)",
        kPositive);
  t.add("[model] AVNet architecture", "model.task", &c.model.task,
        "single_label: softmax cross-entropy, one class a clip; multi_label: sigmoid binary cross-entropy "
        "per class (the mean over clips and classes), a set of classes a clip (shard format v2, or v1 read as one "
        "label each)");
  t.add("[model] AVNet architecture", "model.nce_weight", &c.model.nce_weight, "InfoNCE weight; 0 turns it off",
        kNonNegative);
  t.add("[model] AVNet architecture", "model.init_std", &c.model.init_std, "std of normal weight initialisation",
        kNonNegative);
  t.add("[model] AVNet architecture", "model.init_from", &c.model.init_from,
        "a safetensors file (avtrain-export's, or PyTorch's under torch_avnet.py's names) that a fresh start takes "
        "its weights from, by name; embed.pos of another clip length interpolated per modality; a resume takes "
        "its checkpoint instead");
  t.add("[model] AVNet architecture", "model.init_skip", &c.model.init_skip,
        "comma-separated globs over parameter names that model.init_from leaves at their fresh initial values, "
        "e.g. 'head.cls.*' for a head of other classes");

  t.add("[optim] AdamW and schedule", "optim.lr", &c.optim.lr, "peak learning rate",
        kNonNegative);
  t.add("[optim] AdamW and schedule", "optim.min_lr", &c.optim.min_lr, "learning rate at the end of the cosine",
        kNonNegative);
  t.add("[optim] AdamW and schedule", "optim.warmup_steps", &c.optim.warmup_steps, "linear warm-up steps",
        kAtLeast0);
  t.add("[optim] AdamW and schedule", "optim.weight_decay", &c.optim.weight_decay, "decoupled decay (not norms, biases)",
        kNonNegative);
  t.add("[optim] AdamW and schedule", "optim.beta1", &c.optim.beta1, "AdamW beta1",
        kUnitInterval);
  t.add("[optim] AdamW and schedule", "optim.beta2", &c.optim.beta2, "AdamW beta2",
        kUnitInterval);
  t.add("[optim] AdamW and schedule", "optim.eps", &c.optim.eps, "AdamW epsilon",
        kPositive);
  t.add("[optim] AdamW and schedule", "optim.clip_norm", &c.optim.clip_norm, "global gradient-norm clip; 0 is off",
        kNonNegative);

  const std::string P = "[precision] mixed precision and loss scaling";
  t.add(P, "precision.mode", &c.precision.mode,
        "compute type of matrix products and activations (fp32 master weights and gradients); fp8: bf16 with "
        "the linears' products in FP8, E4M3 forward and E5M2 gradients (CPU: emulated exactly; CUDA: cuBLASLt FP8 products, sm_89 or later)", "precision");
  t.add(P, "precision.fp32_layers", &c.precision.fp32_layers,
        "comma-separated globs over module names kept wholly in fp32, e.g. 'head.*,blocks.0.*'");
  t.add(P, "precision.loss_scale", &c.precision.loss_scale,
        "auto (fp16: dynamic, else none), dynamic, none, or a fixed scale such as 256");
  t.add(P, "precision.init_scale", &c.precision.init_scale, "dynamic scaling: first scale", kPositive);
  t.add(P, "precision.growth_factor", &c.precision.growth_factor,
        "dynamic scaling: factor after growth_interval clean steps", Range<double>{1.0, kInf, ">= 1"});
  t.add(P, "precision.backoff_factor", &c.precision.backoff_factor, "dynamic scaling: factor after an overflow",
        Range<double>{std::numeric_limits<double>::denorm_min(), 1.0, "in (0, 1]"});
  t.add(P, "precision.growth_interval", &c.precision.growth_interval, "dynamic scaling: clean steps before growth",
        kAtLeast1);
  t.add(P, "precision.hysteresis", &c.precision.hysteresis,
        "dynamic scaling: overflowing steps before the scale backs off", kAtLeast1);
  t.add(P, "precision.min_scale", &c.precision.min_scale,
        "dynamic scaling: an overflow at this scale stops the run", kPositive);
  t.add(P, "precision.master_weights", &c.precision.master_weights,
        "fp32: fp32 master weights beside the 16-bit working copies; none (bf16 only): the bf16 weights are the "
        "parameters, AdamW's update computed in fp32 and written back as precision.weight_rounding says (4 bytes "
        "less per parameter of a bf16 module's weight matrix; biases and norms keep fp32)");
  t.add(P, "precision.weight_rounding", &c.precision.weight_rounding,
        "with master_weights none: how the update is written back to the bf16 weights; stochastic: unbiased, its "
        "random bits keyed by (train.seed, step, parameter, element), so repeatable under any layout");
  t.add(P, "precision.detect_anomaly", &c.precision.detect_anomaly,
        "check every module's output, forward and backward; stop at the first inf/NaN naming step, module, "
        "direction", "detect-anomaly");
  t.add(P, "precision.fp8_history", &c.precision.fp8_history,
        "mode fp8: steps of amax history kept per FP8 tensor (delayed scaling)", kAtLeast1);
  t.add(P, "precision.fp8_amax", &c.precision.fp8_amax,
        "mode fp8: the amax a tensor's scale comes from, the largest of its history or the last step's");
  t.add(P, "precision.fp8_margin", &c.precision.fp8_margin,
        "mode fp8: scale = (FP8 max / amax) / 2^margin; above 18 an E4M3 tensor's amax would quantize to 0",
        Range<int>{0, kFp8MarginMax, "in [0, 18]"});
  t.add(P, "precision.fp8_layers", &c.precision.fp8_layers,
        "mode fp8: comma-separated globs over the linear modules whose products are in FP8 (precision.fp32_layers "
        "still keeps a module wholly in fp32), e.g. 'blocks.*'");
  t.add(P, "precision.fp8_first_last_bf16", &c.precision.fp8_first_last_bf16,
        "mode fp8: the linears of the first and the last transformer block in bf16 (Megatron's "
        "--first-last-layers-bf16), whatever precision.fp8_layers says");

  t.add("[train] step loop", "train.steps", &c.train.steps, "optimizer steps", kAtLeast0, "steps");
  t.add("[train] step loop", "train.micro_batch", &c.train.micro_batch, "samples per micro-batch",
        kAtLeast1);
  t.add("[train] step loop", "train.micro_batches", &c.train.micro_batches, "micro-batches per step (accumulated)",
        kAtLeast1);
  t.add("[train] step loop", "train.recompute", &c.train.recompute,
        "what a transformer block keeps for backward: none; attention (not the L x L probabilities: recomputed "
        "from q, k and the softmax statistics); blocks (only its input: its forward runs again in backward). The "
        "results are the same bit for bit; --dry-run shows the memory of each");
  t.add("[train] step loop", "train.seed", &c.train.seed, "seed of weights, split and shuffle", "seed");
  t.add("[train] step loop", "train.eval_interval", &c.train.eval_interval, "steps between validation passes",
        kAtLeast0);
  t.add("[train] step loop", "train.log_interval", &c.train.log_interval, "steps between progress lines",
        kAtLeast0);
  t.add("[train] step loop", "train.tensorboard", &c.train.tensorboard,
        "rank 0 writes TensorBoard event files into --out as the run goes (trace/COLUMN: every number of "
        "trace.csv; grad_share/MODULE: each module's share of the squared gradient norm); 0: none");
  t.add("[train] step loop", "train.init_ulps", &c.train.init_ulps,
        "move every randomly drawn initial weight this many ulps up (0: off): an FP32 twin of a run, "
        "for avtrain-reconcile's noise band", kAtLeast0);
  t.add("[train] step loop", "train.threads", &c.train.threads, "BLAS/OpenMP threads per rank",
        Range<int>{1, 1024, "in [1, 1024]"}, "threads");
  t.add("[train] step loop", "train.out", &c.train.out,
        "trace directory (run.json, trace.csv, layers.csv, ranks.csv)", "out");
  t.add("[train] step loop", "train.max_minutes", &c.train.max_minutes,
        "wall-time budget in minutes from the process's start: stop with a checkpoint (exit 75) while the time left "
        "still covers two steps, the longest evaluation, a checkpoint and 5 s; 0: none (a Slurm job's end time, "
        "SLURM_JOB_END_TIME, still counts)",
        kNonNegative, "max-minutes");

  const std::string L = "[parallel] pipeline x data x context parallelism";
  t.add(L, "parallel.pp", &c.parallel.pp, "pipeline stages", kAtLeast1, "pp");
  t.add(L, "parallel.dp", &c.parallel.dp,
        "data-parallel replicas; 0 infers world size / (pp x cp); world size must be pp x dp x cp", kAtLeast0, "dp");
  t.add(L, "parallel.cp", &c.parallel.cp,
        "context-parallel ranks: each sample's tokens cut over cp ranks (Ulysses all-to-all around attention); "
        "world size = pp x dp x cp; model.heads must be divisible by it (docs/parallel.md)", kAtLeast1, "cp");
  t.add(L, "parallel.schedule", &c.parallel.schedule,
        "pipeline schedule: gpipe (all forwards, then all backwards) or 1f1b (PipeDream-Flush)");
  t.add(L, "parallel.partition", &c.parallel.partition,
        "cut of the layers into stages: params (balance parameters), uniform (layer count), or the first layer "
        "of each stage after the first, e.g. 'blocks.2' or 'blocks.1,blocks.3'");
  t.add(L, "parallel.grad_bucket_mb", &c.parallel.grad_bucket_mb,
        "gradient all-reduce bucket size in MiB of fp32 gradients; buckets launch as backward completes them",
        kPositive);
  t.add(L, "parallel.grad_comm_dtype", &c.parallel.grad_comm_dtype,
        "type of the gradient all-reduce on the wire: fp32, or fp16/bf16 (divided by dp, then summed)");
  t.add(L, "parallel.zero", &c.parallel.zero,
        "ZeRO stage 1: 1 splits each stage's AdamW moments (and, in fp16/bf16, its fp32 masters) over its "
        "data-parallel replicas, each owning a contiguous 1/dp of the stage's flat buffers; gradient buckets are "
        "reduce-scattered, each replica updates its part, the weights are all-gathered in their working types; "
        "0 replicates them (docs/parallel.md)", Range<int>{0, 1, "0 or 1"});
  t.add(L, "parallel.timeline", &c.parallel.timeline,
        "write a Chrome-trace JSON of every rank's spans here (chrome://tracing, Perfetto)", "timeline");

  const std::string V = "[device] backend and collectives";
  t.add(V, "device.backend", &c.device.backend,
        "cpu, or cuda (one GPU per rank: local rank % GPUs on the node)", "device");
  t.add(V, "device.comm", &c.device.comm,
        "collectives through auto (nccl on cuda, mpi on cpu), mpi or nccl; mpi on cuda stages through pinned host "
        "memory: several ranks may share a GPU, and it is the fallback where NCCL is missing or broken",
        "comm");
  t.add(V, "device.allow_tf32", &c.device.allow_tf32,
        "cuda: fp32 products on TF32 tensor cores (off by default so fp32 stays a true baseline)", "allow-tf32");
  t.add(V, "device.fused", &c.device.fused,
        "cuda: the fused kernels (docs/cuda.md): bf16 attention without its L x L probabilities in memory "
        "(FlashAttention's way, sm_80 and later), the AdamW update and its working copies in one pass, biases, "
        "residuals, GELU and dW accumulation fused with their rounding; 0 (the default until a GPU run shows "
        "them faster) keeps the separate kernels");
  t.add(V, "device.attention", &c.device.attention,
        "cuda, device.fused 1: the fused attention's engine: auto (cuDNN's fused SDPA where libcudnn loads and "
        "takes the shape, else the own flash kernel; rank 0's log says which), cudnn (an error where it cannot), "
        "own (docs/cuda.md)");
  t.add(V, "device.arena_mb", &c.device.arena_mb,
        "cuda: device memory taken at start for every tensor of the run (no allocation in the step loop); "
        "0: 90% of the GPU's free memory, or 80% of an equal share of its memory where ranks share it (--comm mpi)",
        kNonNegative);

  t.add("[checkpoint] checkpoints", "checkpoint.interval", &c.checkpoint.interval,
        "steps between checkpoints (0: only the last step's; -1: none written, not even the last or on a stop "
        "signal: a benchmark's run; an existing one is still resumed)",
        Range<int>{-1, kIntMax, ">= -1"});
  t.add("[checkpoint] checkpoints", "checkpoint.minutes", &c.checkpoint.minutes,
        "wall-time minutes between checkpoints, beside checkpoint.interval (a lost node loses at most this much "
        "work; rank 0's clock, agreed in the step's one reduction); 0: off", kNonNegative);
  t.add("[checkpoint] checkpoints", "checkpoint.keep", &c.checkpoint.keep,
        "committed checkpoints kept; an older one is deleted only after a newer one is committed", kAtLeast1);
  t.add("[checkpoint] checkpoints", "checkpoint.dir", &c.checkpoint.dir, "where checkpoints go (default OUT/checkpoints)");
  t.add("[checkpoint] checkpoints", "checkpoint.zero_write", &c.checkpoint.zero_write,
        "under parallel.zero 1: parallel (each replica writes the file of its part of the optimizer state) or "
        "gathered (the parts gathered to the stage's first replica, one file per stage); both load at any layout");

  const std::string G = "[augment] training-time augmentation (docs/augmentation.md), keyed by seed, epoch and sample";
  t.add(G, "augment.freq_masks", &c.augment.freq_masks, "SpecAugment frequency masks per sample (0: off)", kAtLeast0);
  t.add(G, "augment.freq_mask_width", &c.augment.freq_mask_width,
        "largest frequency mask, in mel bins (each width uniform in 0..this)", kAtLeast0);
  t.add(G, "augment.time_masks", &c.augment.time_masks, "SpecAugment time masks per sample (0: off)", kAtLeast0);
  t.add(G, "augment.time_mask_width", &c.augment.time_mask_width,
        "largest time mask, in log-mel frames (each width uniform in 0..this, within the valid frames)", kAtLeast0);
  t.add(G, "augment.crop_scale", &c.augment.crop_scale,
        "random resized crop of the frames: smallest share of the area kept (aspect ratio in [3/4, 4/3]), resized "
        "back bilinearly; the same crop for every frame of a clip; 1: off",
        Range<double>{std::numeric_limits<double>::denorm_min(), 1.0, "in (0, 1]"});
  t.add(G, "augment.flip", &c.augment.flip, "mirror a clip's frames left-right with probability 1/2");
  t.add(G, "augment.mixup", &c.augment.mixup,
        "mixup alpha: the rows of a micro-batch mixed with a keyed permutation of it, lambda = max(l, 1 - l), "
        "l ~ Beta(alpha, alpha); loss lambda CE(own label) + (1 - lambda) CE(partner's); 0: off", kNonNegative);

  t.add("[dry-run] sizing a job for a GPU", "dry-run.device_memory_gb", &c.dry_run.device_memory_gb,
        "GiB of one GPU that --dry-run sizes the job for (each rank's state, activations and workspace against "
        "90 % of it, or device.arena_mb)", kPositive);

  t.add("[debug] fault injection for tests", "debug.inject_overflow", &c.debug.inject_overflow,
        "RANK:STEP: put an inf into that rank's gradients at that step (every rank must skip it)");
  t.add("[debug] fault injection for tests", "debug.perturb_weights", &c.debug.perturb_weights,
        "RANK:STEP: move that rank's first weight after that step's update (its replicas must notice)");
  t.add("[debug] fault injection for tests", "debug.stall_reader", &c.debug.stall_reader,
        "RANK:STEP: that rank's data for that step never arrives (its watchdog must name the wait)");
  t.add("[debug] fault injection for tests", "debug.hold_checkpoint", &c.debug.hold_checkpoint,
        "POINT:STEP: the write of checkpoint step-STEP stops at POINT and waits to be killed, saying so: copy "
        "(its directory made, the state not yet copied out), stage_file (a stage file written whole as .tmp, "
        "not renamed), commit (every stage file written, no committed marker)");
  t.add("[debug] fault injection for tests", "debug.watchdog_s", &c.debug.watchdog_s,
        "seconds a rank may make no progress before it aborts the job with a line naming what it waits for "
        "(exit 124); -1: the larger of 300 s and 20x the median step (3x the longest evaluation or checkpoint); "
        "0: off", Range<double>{-1, 1e9, "-1, 0, or seconds"});
  t.add("[debug] fault injection for tests", "debug.stage_comm", &c.debug.stage_comm,
        "cpu: stage the data-parallel and pipeline collectives through host copies, made late, as --comm mpi "
        "does on cuda (checks that staging on machines without a GPU)");
  t.add("[debug] fault injection for tests", "debug.fp8_freeze_scale", &c.debug.fp8_freeze_scale,
        "MODULE: under precision.mode fp8, that FP8 linear's scales (x, W, dy) stay at the recipe's first, 1, "
        "whatever its amaxes (the doctored run whose verdict must name it); a name that is not an FP8 linear "
        "of the run is an error");
}

}  // namespace

ParsedOptions parse_options(const std::vector<std::string>& args) {
  ParsedOptions parsed;
  RunConfig& c = parsed.config;
  OptionTable table;
  bind(table, c);

  po::options_description general("General");
  general.add_options()("help,h", "print this help")("config", po::value<std::string>(&c.deck),
                                                      "input deck (*.ini); also the first positional argument")(
      "dry-run", po::bool_switch(&c.dry_run.on),
      "print layers, parameter counts, the memory of each train.recompute setting and, for --device cuda, what "
      "each rank holds on a GPU of dry-run.device_memory_gb and what makes it fit; then exit")(
      "resume", po::value<std::string>(&c.resume)->default_value("auto"),
      "auto: continue from the newest committed checkpoint, if there is one; none: start afresh; or a "
      "checkpoint directory (OUT/checkpoints/step-NNNNNNN)")(
      "overwrite", po::bool_switch(&c.overwrite),
      "start afresh (never resume), replacing the traces in --out and the checkpoints in checkpoint.dir")(
      "eval-only", po::bool_switch(&c.eval_only),
      "evaluate the checkpoint --resume names (auto: the newest committed one) on the validation split, print "
      "the loss and accuracy, write them to OUT/eval.json, and exit");
  table.add_short_forms(general);

  po::options_description deck_keys;
  for (auto* s : table.sections()) deck_keys.add(*s);
  po::options_description all;
  all.add(general).add(deck_keys);
  po::positional_options_description positional;
  positional.add("config", 1);

  po::variables_map vm;
  for (std::size_t i = 0; i < args.size(); ++i)
    refuse_boost_template_tokens(args[i], "command line word " + std::to_string(i + 1));
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  } catch (const po::error& e) {
    throw Error(std::string("command line: ") + e.what());
  }
  table.refuse_doubles(vm);
  if (vm.count("help")) {
    std::ostringstream out;
    out << "usage: avtrain [DECK.ini] [--section.key value ...]\n\n" << general;
    for (auto* s : table.sections()) out << "\n" << *s;
    parsed.help = out.str();
    return parsed;
  }
  if (vm.count("config")) {
    const std::string deck = vm["config"].as<std::string>();
    std::ifstream file(deck);
    if (!file) throw Error("input deck " + deck + ": cannot be opened");
    std::ostringstream text;
    text << file.rdbuf();
    std::istringstream lines(text.str());
    int number = 0;
    for (std::string line; std::getline(lines, line);)
      refuse_boost_template_tokens(line, "input deck " + deck + " line " + std::to_string(++number));
    std::istringstream in(text.str());
    try {
      po::store(po::parse_config_file(in, deck_keys, false), vm);
    } catch (const po::error& e) {
      throw Error("input deck " + deck + ": " + e.what());
    }
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw Error(std::string("options: ") + e.what());
  }
  table.apply_short_forms(vm);
  if (c.overwrite && c.eval_only) throw Error("--overwrite and --eval-only: an evaluation replaces nothing; drop one");
  if (c.overwrite && c.resume != "auto" && c.resume != "none")
    throw Error("--overwrite starts the run afresh, --resume " + c.resume + " continues from a checkpoint; give one of them");
  if (!vm.count("data.reader_threads") || vm["data.reader_threads"].defaulted())
    c.data.reader_threads = default_reader_threads(c.device.backend == DeviceBackend::cpu, c.train.threads);
  table.check();
  if (!c.debug.fp8_freeze_scale.empty() && c.precision.mode != PrecisionMode::fp8)
    throw Error("option debug.fp8_freeze_scale = " + c.debug.fp8_freeze_scale +
                ": needs precision.mode fp8 (no FP8 scale to freeze)");
  if (c.parallel.cp > 1 && c.precision.mode == PrecisionMode::fp8)
    throw Error("option parallel.cp = " + std::to_string(c.parallel.cp) +
                ": not with precision.mode fp8 yet: per-tensor FP8 scales would differ between the parts");
  if (c.model.heads % c.parallel.cp != 0)
    throw Error("option parallel.cp = " + std::to_string(c.parallel.cp) + ": model.heads " +
                std::to_string(c.model.heads) + " is not divisible by parallel.cp " + std::to_string(c.parallel.cp) +
                " (the all-to-all gives each part heads / cp whole heads)");
  if (c.precision.master_weights == MasterWeights::none && c.precision.mode != PrecisionMode::bf16)
    throw Error(std::string("option precision.master_weights = none: needs precision.mode bf16 (") +
                (c.precision.mode == PrecisionMode::fp32 ? "fp32 weights are their own masters"
                 : c.precision.mode == PrecisionMode::fp8 ? "not combined with FP8 linears yet"
                 : "fp16 keeps fp32 masters: the rounding written here is to bf16, and fp16's 5-bit exponent would lose small weights and updates") +
                ")");
  if (c.precision.weight_rounding == Rounding::stochastic && c.precision.master_weights != MasterWeights::none)
    throw Error("option precision.weight_rounding = stochastic: needs precision.master_weights none (with fp32 "
                "masters the bf16 copy is rounded to nearest from them)");
  table.dump(parsed.resolved);
  // run.json records every option and the deck's path as JSON text, which is UTF-8: a value that is
  // not is refused here, naming it, and not by the JSON writer when the run has started.
  for (const auto& [key, value] : parsed.resolved.items())
    if (value.is_string() && !is_utf8(value.get<std::string>()))
      throw Error("option " + key + ": its value is not UTF-8 text (run.json records every option as JSON)");
  if (!is_utf8(c.deck)) throw Error("input deck: its path is not UTF-8 text (run.json records it as JSON)");
  return parsed;
}

}  // namespace avtrain
