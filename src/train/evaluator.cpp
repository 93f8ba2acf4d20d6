#include "train/evaluator.hpp"

#include <algorithm>
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
  for (std::size_t j = 0, begin = 0; begin < val.size(); ++j, begin += mb)
    if (int(j % std::size_t(topo_.dp)) == topo_.dp_rank)
      mine.emplace_back(val.begin() + std::ptrdiff_t(begin), val.begin() + std::ptrdiff_t(std::min(val.size(), begin + mb)));
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
  std::vector<std::int64_t> hits(std::size_t(2 * shards_.info().num_classes), 0);
  for (std::size_t j = 0; j < mine.size(); ++j) {
    refill();
    runner.forward_only(runner.reads() ? &pending.front() : nullptr, hits, sums);
    if (runner.reads()) pending.pop_front();
  }
  runner.finish_sends();
  world_.all_reduce(sums, 2, parallel::ReduceOp::sum);
  std::vector<double> counts(hits.begin(), hits.end());  // exact below 2^53
  world_.all_reduce(counts.data(), counts.size(), parallel::ReduceOp::sum);
  e.per_class = per_class(std::vector<std::int64_t>(counts.begin(), counts.end()));
  e.loss = sums[0] / double(val.size());
  e.acc = sums[1] / double(val.size());
  return e;
}

nlohmann::json Evaluator::per_class(const std::vector<std::int64_t>& class_hits) const {
  const std::vector<std::string>& names = shards_.info().class_names;
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t c = 0; 2 * c + 1 < class_hits.size(); ++c) {
    const std::int64_t n = class_hits[2 * c], right = class_hits[2 * c + 1];
    rows.push_back({{"class", c < names.size() ? names[c] : std::to_string(c)}, {"samples", n},
                    {"acc", n > 0 ? double(right) / double(n) : 0.0}});
  }
  return rows;
}

std::string Evaluator::per_class_text(const nlohmann::json& rows) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(3);
  for (const auto& r : rows)
    text << (text.tellp() > 0 ? ", " : "") << r["class"].get<std::string>() << " " << r["acc"].get<double>() << " ("
         << r["samples"].get<std::int64_t>() << ")";
  return text.str();
}

}  // namespace avtrain
