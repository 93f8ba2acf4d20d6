#include "optim/distributed_optimizer.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "core/error.hpp"
#include "parallel/zero_parts.hpp"

namespace avtrain {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}

DistributedOptimizer::DistributedOptimizer(Backend& be, const DistributedOptimizerConfig& config)
    : be_(be), config_(config) {}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::build(int dp, int dp_rank, parallel::Communicator* data) {
  require(dp >= 1 && dp_rank >= 0 && dp_rank < dp, "internal: replica " + std::to_string(dp_rank) + " of " +
                                                       std::to_string(dp));
  dp_ = dp;
  dp_rank_ = dp_rank;
  data_ = data;
  if (config_.zero == 1 && dp > 1) parts_ = parallel::zero_parts(params_.total_size(), dp);
  if (!config_.masters) params_.drop_masters();
  if (sharded()) params_.keep_masters_of(*own_part());
  params_.allocate(config_.seed, config_.init_ulps);
  params_.refresh_working(be_);
  if (data) {
    std::vector<std::size_t> bounds;
    for (const ParamInfo& p : params_.params()) bounds.push_back(p.offset);
    bounds.push_back(params_.total_size());
    buckets_ = std::make_unique<parallel::GradBuckets>(be_, params_.grads().data(), std::move(bounds),
                                                       config_.bucket_mb, config_.wire, *data, parts_,
                                                       config_.sample_parts);
  }
  adamw_ = std::make_unique<AdamW>(be_, params_, config_.optim, own_part(), config_.rounding, config_.seed);
}

std::optional<FlatPart> DistributedOptimizer::own_part() const {
  if (!sharded()) return std::nullopt;
  return FlatPart{parts_[std::size_t(dp_rank_)], parts_[std::size_t(dp_rank_) + 1]};
}

FlatPart DistributedOptimizer::statistics_part() const {
  if (dp_ == 1) return {0, params_.total_size()};
  const std::vector<std::size_t> cut = sharded() ? parts_ : parallel::zero_parts(params_.total_size(), dp_);
  return {cut[std::size_t(dp_rank_)], cut[std::size_t(dp_rank_) + 1]};
}

void DistributedOptimizer::start_step() {
  if (buckets_) buckets_->start_step();
}

void DistributedOptimizer::gradients_final_from(std::size_t offset) {
  if (!buckets_) return;
  buckets_->ready_from(offset);
  buckets_->progress();
}

void DistributedOptimizer::finish_reduce(const std::function<void(std::size_t)>& waiting_for) {
  if (buckets_) buckets_->finish(waiting_for);
}

double DistributedOptimizer::local_sum_squares() const { return buckets_ ? buckets_->local_sum_squares() : 0.0; }

void DistributedOptimizer::start_param_stats(const float* base, FlatPart part, float threshold,
                                             AlignedArray<Backend::TensorStats>& into) {
  std::vector<Backend::Span> spans;
  for (const ParamInfo& p : params_.params()) {
    const FlatPart mine = part.overlap(p.offset, p.offset + p.size);
    spans.push_back({mine.begin - part.begin, mine.size()});
  }
  into.resize(spans.size());
  be_.tensor_stats_many_into(base, spans.data(), int(spans.size()), threshold, into.data());
}

void DistributedOptimizer::start_statistics(float grad_threshold) {
  const FlatPart part = statistics_part();
  start_param_stats(params_.grads().data() + part.begin, part, grad_threshold, grad_stats_);
  if (params_.masterless())
    start_value_stats_masterless(part);
  else
    start_param_stats(params_.masters().data() + (part.begin - params_.master_part().begin), part, 0.0f, value_stats_);
}

void DistributedOptimizer::start_value_stats_masterless(FlatPart part) {
  // One pass over the fp32 values (a bf16 parameter's entry empty there), then each bf16 parameter's
  // entry from its weights widened into one scratch buffer (in order: a device reuses it in turn).
  const std::vector<ParamInfo>& params = params_.params();
  std::vector<Backend::Span> spans;
  std::size_t widest = 0;
  for (const ParamInfo& p : params) {
    const FlatPart mine = part.overlap(p.offset, p.offset + p.size);
    if (p.working != DType::f32) {
      spans.push_back({0, 0});
      widest = std::max(widest, mine.size());
    } else {
      spans.push_back({p.value_offset + (mine.begin - p.offset), mine.size()});
    }
  }
  value_stats_.resize(spans.size());
  be_.tensor_stats_many_into(params_.values().data(), spans.data(), int(spans.size()), 0.0f, value_stats_.data());
  if (widened_.size() < widest) widened_.resize(widest);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    const FlatPart mine = part.overlap(p.offset, p.offset + p.size);
    if (p.working == DType::f32 || mine.size() == 0) continue;
    be_.unpack(Operand{params_.working().data() + p.working_offset + (mine.begin - p.offset), p.working}, widened_.data(),
               mine.size());
    const Backend::Span whole{0, mine.size()};
    be_.tensor_stats_many_into(widened_.data(), &whole, 1, 0.0f, value_stats_.data() + i);
  }
}

DistributedOptimizer::Statistics DistributedOptimizer::statistics() {
  Statistics s;
  s.grads.resize(grad_stats_.size());
  s.values.resize(value_stats_.size());
  grad_stats_.download(s.grads.data());
  value_stats_.download(s.values.data());
  if (dp_ == 1 || !data_) return s;
  std::vector<double> sums;
  for (const auto* stats : {&s.grads, &s.values})
    for (const Backend::TensorStats& t : *stats)
      sums.insert(sums.end(), {t.sum_squares, double(t.nonfinite), double(t.nonzero), double(t.below)});
  data_->all_reduce(sums.data(), sums.size(), parallel::ReduceOp::sum);  // counts exact below 2^53
  std::size_t i = 0;
  for (auto* stats : {&s.grads, &s.values})
    for (Backend::TensorStats& t : *stats) {
      t = {sums[i], std::size_t(sums[i + 1]), std::size_t(sums[i + 2]), std::size_t(sums[i + 3])};
      i += 4;
    }
  return s;
}

std::pair<double, double> DistributedOptimizer::replica_range() {
  // What every replica holds whole: the fp32 values of the trainable parameters and, where the
  // masters are split (ZeRO in mixed precision), the 16-bit working copies.
  std::vector<Backend::Span> spans;
  for (const ParamInfo& p : params_.params())
    if (p.trainable && (p.working == DType::f32 || !params_.values_packed())) spans.push_back({p.value_offset, p.size});
  std::vector<Backend::TensorStats> stats(spans.size());
  if (!spans.empty()) be_.tensor_stats_many(params_.values().data(), spans.data(), int(spans.size()), 0.0f, stats.data());
  double sum = 0;
  for (const Backend::TensorStats& t : stats) sum += t.sum_squares;
  if (params_.values_packed()) sum += working_sum_squares();
  double range[2] = {sum, -sum};  // max and -min over the replicas
  if (dp_ > 1 && data_) data_->all_reduce(range, 2, parallel::ReduceOp::max);
  return {-range[1], range[0]};
}

// The working copies' sum of squares, unpacked a chunk at a time.
double DistributedOptimizer::working_sum_squares() {
  constexpr std::size_t kChunk = std::size_t(1) << 20;
  const Buffer16& working = params_.working();
  Buffer scratch;
  scratch.resize(std::min(kChunk, working.size()));
  double sum = 0;
  for (std::size_t begin = 0; begin < working.size(); begin += kChunk) {
    const std::size_t n = std::min(kChunk, working.size() - begin);
    be_.unpack({working.data() + begin, params_.working_type()}, scratch.data(), n);
    sum += be_.tensor_stats(scratch.data(), n, 0.0f).sum_squares;
  }
  return sum;
}

void DistributedOptimizer::step(float lr, float grad_factor) { adamw_->step(lr, grad_factor); }

void DistributedOptimizer::step_as_decided_on_device(float lr, const Backend::UpdateRule& rule) {
  be_.update_gate(grad_stats_.data(), rule, adamw_->gate());
  adamw_->step(lr, adamw_->gate());
}

void DistributedOptimizer::all_gather() {
  if (!sharded() || !data_) return;
  // In the working types: fp32 values, and the 16-bit working copies where the masters are split or none.
  parallel::Request values = data_->all_gather_async(params_.values().data(), params_.value_bounds(parts_), DType::f32);
  parallel::Request working;
  if (params_.values_packed())
    working = data_->all_gather_async(params_.working().data(), params_.working_bounds(parts_), params_.working_type());
  values.wait();
  working.wait();
}

std::string DistributedOptimizer::memory_description() {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2);
  const double masters = double(params_.masters().bytes()) / kMiB;
  const double moments = adamw_ ? double(adamw_->first_moments().bytes() + adamw_->second_moments().bytes()) / kMiB : 0.0;
  s << "fp32 masters " << masters << " MiB, AdamW moments " << moments << " MiB (optimizer and masters "
    << masters + moments << " MiB";
  if (sharded()) s << ", parallel.zero 1: this replica's part of " << dp_;
  s << "), gradients " << double(params_.grads().bytes()) / kMiB << " MiB";
  if (params_.values_packed()) s << ", fp32 values of the other parameters " << double(params_.values().bytes()) / kMiB << " MiB";
  if (params_.working_bytes())
    s << (params_.masterless() ? ", bf16 weights (no fp32 masters) " : ", 16-bit working copies ")
      << double(params_.working_bytes()) / kMiB << " MiB";
  return s.str();
}

double DistributedOptimizer::bytes() const {
  const double moments = sharded() ? double(own_part()->size()) : double(params_.total_size());
  return double(params_.bytes()) + 8.0 * moments;
}

}  // namespace avtrain
