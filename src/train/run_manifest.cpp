#include "train/run_manifest.hpp"

#include <filesystem>

#include "build_info.hpp"
#include "checkpoint/stage_checkpoint.hpp"
#include "model/transformer_block.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "precision/fp8_layers.hpp"

namespace avtrain {

namespace {
// What a shard set is, for run.json and for what a resumed run must match.
nlohmann::json data_fingerprint(const data::SetInfo& s) {
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
// Where a fresh start's weights come from: not what a resume must match (it takes its checkpoint).
bool starting_weights_option(const std::string& key) { return key == "model.init_from" || key == "model.init_skip"; }
}  // namespace

RunManifest::RunManifest(const RunConfig& config, const parallel::Topology& topo, Backend& be,
                         const PrecisionPolicy& policy, const data::ShardSet& shards, const data::ShardSet* val_shards)
    : config_(config), topo_(topo), be_(be), policy_(policy), shards_(shards), val_shards_(val_shards) {}

nlohmann::json RunManifest::fingerprint(const nlohmann::json& options) const {
  nlohmann::json f = {{"format_version", checkpoint::kFormatVersion},
                      {"global_batch", config_.global_batch(topo_.dp)},
                      {"seed", config_.train.seed},
                      {"precision", enum_name(config_.precision.mode)}};  // fp8: not bf16
  // How the weights are kept (absent with fp32 masters, as before the option existed): bf16 weights
  // without masters resume as they were written, and a run keeps its rounding.
  if (config_.precision.master_weights != MasterWeights::fp32) {
    f["master_weights"] = enum_name(config_.precision.master_weights);
    f["weight_rounding"] = enum_name(config_.precision.weight_rounding);
  }
  f["model"] = nlohmann::json::object();
  // model.task only where it is multi_label: a single-label run's fingerprint is what it was before
  // the option existed, so its checkpoints resume across that change.
  for (auto it = options.begin(); it != options.end(); ++it)
    if (it.key().rfind("model.", 0) == 0 && !starting_weights_option(it.key()) &&
        !(it.key() == "model.task" && *it == "single_label"))
      f["model"][it.key().substr(6)] = *it;
  f["data"] = data_fingerprint(shards_.info());
  if (val_shards_) f["val_data"] = data_fingerprint(val_shards_->info());
  // Augmentation changes what trains: a resume must keep it. Absent when off, as before it existed.
  if (config_.augment.any() || config_.data.clip_seconds != 0) {
    f["augment"] = nlohmann::json::object();
    for (auto it = options.begin(); it != options.end(); ++it)
      if (it.key().rfind("augment.", 0) == 0 || it.key() == "data.clip_seconds") f["augment"][it.key()] = *it;
  }
  // Balanced sampling changes what trains (absent when uniform, as before it existed).
  if (config_.data.sampling != data::Sampling::uniform) f["sampling"] = enum_name(config_.data.sampling);
  return f;
}

std::string RunManifest::attention_path() const {
  if (config_.model.depth == 0 || config_.model.heads <= 0) return "unfused";
  const int head_dim = config_.model.width / config_.model.heads;
  const DType qkv = policy_.of("blocks.0.attn.qkv");
  const bool fused = TransformerBlock::attention_fused(be_, qkv, head_dim);
  const std::string engine = TransformerBlock::attention_engine(be_, qkv, head_dim);
  const std::string path = fused ? "fused" : "unfused";
  return engine.empty() ? path : path + " (" + engine + ")";
}

nlohmann::json RunManifest::run_json(const nlohmann::json& options, const nlohmann::json& fingerprint,
                                     const StagePlan& plan, const Measures& measures) const {
  const RunConfig& config = config_;
  const parallel::Topology& topo = topo_;
  nlohmann::json m;
  m["config"] = options;
  m["deck"] = config.deck;
  m["seed"] = config.train.seed;
  m["fingerprint"] = fingerprint;  // what a resume must match; also how a restart knows its own traces
  m["build"] = {{"version", build_info::version}, {"git_commit", build_info::git_commit},
                {"compiler", build_info::compiler}, {"build_type", build_info::build_type},
                {"blas", build_info::blas}};
  std::size_t parameters = 0;
  double forward_flops = 0;  // matrix-product FLOPs of one micro-batch through the whole net
  for (const auto& l : plan.layers) parameters += l.params, forward_flops += l.flops;
  m["model"]["parameters"] = parameters;
  // Backward takes twice the forward's products: what model FLOP utilisation counts per step.
  m["model"]["train_flops_per_step"] = 3.0 * forward_flops * config.train.micro_batches * topo.dp;
  m["model"]["tokens"] = measures.geometry.tokens;
  m["model"]["audio_tokens"] = measures.geometry.audio_tokens;
  m["model"]["video_tokens"] = measures.geometry.video_tokens;
  const data::SetInfo& set = shards_.info();
  m["data"] = data_fingerprint(set);
  m["data"]["dir"] = config.data.dir;
  m["data"]["train_samples"] = measures.sampler.train_size();
  m["data"]["val_samples"] = measures.val_samples;
  if (val_shards_) m["data"]["val_dir"] = config.data.val_dir;
  if (!set.class_names.empty()) m["data"]["class_names"] = set.class_names;
  m["data"]["steps_per_epoch"] = measures.sampler.steps_per_epoch();
  nlohmann::json stages = nlohmann::json::array();
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    nlohmann::json names = nlohmann::json::array();
    std::size_t count = 0;
    for (int i = plan.stages[s].first; i < plan.stages[s].last; ++i) {
      names.push_back(plan.layers[i].name);
      count += plan.layers[i].params;
    }
    stages.push_back({{"stage", s}, {"layers", names}, {"parameters", count}});
  }
  m["layout"] = {{"device", be_.name()},
                 {"threads", config.train.threads},
                 {"world_size", topo.world},
                 {"pp", topo.pp},
                 {"dp", topo.dp},
                 {"cp", topo.cp},
                 {"schedule", enum_name(config.parallel.schedule)},
                 {"stages", stages},
                 {"micro_batch", config.train.micro_batch},
                 {"micro_batches", config.train.micro_batches},
                 {"recompute", enum_name(config.train.recompute)},
                 {"global_batch", config.global_batch(topo.dp)},
                 {"grad_comm_dtype", dtype_name(config.parallel.grad_comm_dtype)},
                 {"grad_bucket_mb", config.parallel.grad_bucket_mb},
                 {"grad_buckets", measures.grad_buckets},
                 {"zero", config.parallel.zero}};
  const bool amp = policy_.compute() != DType::f32;
  nlohmann::json fp32_modules = nlohmann::json::array();
  if (amp)
    for (const std::string& module : plan.modules)
      if (policy_.of(module) == DType::f32) fp32_modules.push_back(module);
  const bool fp8 = config_.precision.mode == PrecisionMode::fp8;
  // The linears in FP8: the linear modules (named as the layers name them) that Fp8Layers selects.
  nlohmann::json fp8_modules = nlohmann::json::array();
  Fp8Layers select(config_.precision);
  for (const std::string& module : plan.modules) {
    const auto ends = [&](const char* tail) {
      const std::string t(tail);
      return module.size() >= t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0;
    };
    const bool linear = module == "video.patch" || module == "head.cls" || ends(".attn.qkv") || ends(".attn.proj") ||
                        ends(".mlp.fc1") || ends(".mlp.fc2");
    if (linear && select.in_fp8(module, config_.model.depth)) fp8_modules.push_back(module);
  }
  m["precision"] = {{"mode", enum_name(config_.precision.mode)},
                    {"products", be_.gemm_engine(policy_.compute())},
                    {"fp8_products", fp8 ? be_.gemm_engine(DType::e4m3) : std::string()},
                    {"loss_scaling", measures.loss_scaling},
                    {"attention", attention_path()},
                    {"fp32_modules", fp32_modules},
                    {"fp8_modules", fp8_modules}};
  return m;
}

void RunManifest::log_layout(std::ostream& log, const StagePlan& plan, const std::string& loss_scaling,
                             const std::string& parameter_memory) const {
  const parallel::Topology& topo = topo_;
  log << "[rank 0] " << topo.world << " rank(s): pp " << topo.pp << " x dp " << topo.dp
      << (topo.cp > 1 ? " x cp " + std::to_string(topo.cp) + " (each sample's tokens cut over " +
                            std::to_string(topo.cp) + " ranks)"
                      : std::string())
      << ", "
      << enum_name(config_.parallel.schedule) << ", " << config_.train.micro_batches << " micro-batch(es) of "
      << config_.train.micro_batch << " per replica, global batch " << config_.global_batch(topo.dp) << "\n";
  for (std::size_t s = 0; s < plan.stages.size(); ++s)
    log << "[rank 0]   stage " << s << ": " << plan.layers[plan.stages[s].first].name << " .. "
        << plan.layers[plan.stages[s].last - 1].name << "\n";
  if (policy_.compute() != DType::f32)
    log << "[rank 0] precision " << enum_name(config_.precision.mode) << ", loss scaling " << loss_scaling
        << ", attention " << attention_path() << "\n";
  // The products' engine names the epilogues where the linears take them (CUDA under device.fused).
  if (policy_.compute() != DType::f32 &&
      be_.gemm_engine(policy_.compute()).find("cuBLASLt epilogues") != std::string::npos)
    log << "[rank 0] linear layers: cuBLASLt epilogues (16-bit outputs with their bias, bias gradients)\n";
  log << "[rank 0] parameter memory of rank " << topo.rank << ": " << parameter_memory << "\n";
}

}  // namespace avtrain
