#include "train/evaluator.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <future>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "train/batch_feed.hpp"

namespace avtrain {

namespace {
std::vector<std::int64_t> validation_samples(const data::ShardSet* val_shards, const data::Sampler& sampler) {
  if (!val_shards) return sampler.validation();
  std::vector<std::int64_t> all(std::size_t(val_shards->info().total_samples));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  return all;
}
}  // namespace

Evaluator::Evaluator(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world,
                     const data::ShardSet& shards, const data::ShardSet* val_shards, const data::Sampler& sampler)
    : config_(config), topo_(topo), world_(world), shards_(shards), samples_(validation_samples(val_shards, sampler)) {}

Evaluator::Result Evaluator::evaluate(StageRunner& runner, data::Prefetcher& reader,
                                      const data::Augmenter* augmenter) const {
  if (augmenter && !augmenter->changes_evaluation()) augmenter = nullptr;
  Result e;
  const std::vector<std::int64_t>& val = samples_;
  if (val.empty()) return e;
  const std::size_t mb = std::size_t(config_.train.micro_batch);
  std::vector<std::vector<std::int64_t>> mine;
  std::vector<std::size_t> first_position;  // where each of mine begins in `val`
  for (std::size_t j = 0, begin = 0; begin < val.size(); ++j, begin += mb)
    if (int(j % std::size_t(topo_.dp)) == topo_.dp_rank) {
      mine.emplace_back(val.begin() + std::ptrdiff_t(begin), val.begin() + std::ptrdiff_t(std::min(val.size(), begin + mb)));
      first_position.push_back(begin);
    }
  // A few micro-batches are read ahead, never the whole split: memory stays bounded.
  const std::size_t ahead = std::size_t(std::max(1, config_.data.prefetch_steps) * config_.train.micro_batches);
  std::deque<std::future<data::MicroBatch>> pending;
  std::size_t next = 0;
  auto refill = [&] {
    if (!runner.reads()) return;
    for (; next < mine.size() && pending.size() < ahead; ++next) {
      data::Prefetcher::Transform crop;
      if (augmenter) crop = [augmenter](data::MicroBatch& b) { augmenter->evaluate(b); };
      pending.push_back(reader.submit(mine[next], runner.fields(), std::move(crop)));
    }
  };
  double sums[2] = {0, 0};  // loss x samples, correct
  const auto classes = std::size_t(shards_.info().num_classes);
  // Every sample's logits, then its set of classes, at its position in `val`: this rank's rows where it
  // is a last stage, zero elsewhere, summed over the world (exact: one rank holds each value). The cp
  // ranks of a replica hold the same scores and sums: part 0's are counted.
  const bool counted = topo_.cp_rank == 0;
  std::vector<double> rows(val.size() * 2 * classes, 0.0);
  for (std::size_t j = 0; j < mine.size(); ++j) {
    refill();
    ScoreRows scores;
    runner.forward_only(runner.reads() ? &pending.front() : nullptr, scores, sums);
    if (runner.reads()) pending.pop_front();
    for (std::size_t i = 0; counted && i < scores.logits.size(); ++i) {
      const std::size_t row = first_position[j] + i / classes, c = i % classes;
      rows[row * 2 * classes + c] = scores.logits[i];
      rows[row * 2 * classes + classes + c] = scores.targets[i];
    }
  }
  runner.finish_sends();
  if (!counted) sums[0] = sums[1] = 0;
  world_.all_reduce(sums, 2, parallel::ReduceOp::sum);
  world_.all_reduce(rows.data(), rows.size(), parallel::ReduceOp::sum);
  std::vector<float>& logits = e.logits;
  std::vector<std::uint8_t>& targets = e.targets;
  logits.resize(val.size() * classes);
  targets.resize(val.size() * classes);
  for (std::size_t row = 0; row < val.size(); ++row)
    for (std::size_t c = 0; c < classes; ++c) {
      logits[row * classes + c] = float(rows[row * 2 * classes + c]);
      targets[row * classes + c] = rows[row * 2 * classes + classes + c] != 0;
    }
  e.metrics = val_metrics(logits, targets, int(classes));
  e.per_class = per_class(e.metrics);
  e.loss = sums[0] / double(val.size());
  e.acc = sums[1] / double(val.size());
  return e;
}

nlohmann::json Evaluator::per_class(const ValMetrics& metrics) const {
  const std::vector<std::string>& names = shards_.info().class_names;
  const bool multi_label = config_.model.task == Task::multi_label;
  const auto number = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t c = 0; c < metrics.per_class.size(); ++c) {
    const ClassMetrics& m = metrics.per_class[c];
    nlohmann::json row = {{"class", c < names.size() ? names[c] : std::to_string(c)}, {"samples", m.samples}};
    if (!multi_label) row["acc"] = m.samples > 0 ? double(m.top1) / double(m.samples) : 0.0;
    row["ap"] = number(m.ap);
    row["auc"] = number(m.auc);
    rows.push_back(row);
  }
  return rows;
}

std::string Evaluator::per_class_text(const nlohmann::json& rows) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(3);
  for (const auto& r : rows) {
    const nlohmann::json& value = r.contains("acc") ? r["acc"] : r["ap"];
    text << (text.tellp() > 0 ? ", " : "") << r["class"].get<std::string>() << " ";
    if (value.is_null()) text << "-";
    else text << value.get<double>();
    text << " (" << r["samples"].get<std::int64_t>() << ")";
  }
  return text.str();
}

}  // namespace avtrain
