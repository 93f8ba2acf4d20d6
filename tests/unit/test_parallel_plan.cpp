// Pure pieces of the parallel plan: stage partitions, pipeline schedules, the Chrome timeline.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/timeline.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/stage_partition.hpp"

namespace {

using namespace avtrain;
using namespace avtrain::parallel;

// ---------- helpers ----------

std::string thrown_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no avtrain::Error thrown";
  return "";
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  const std::string msg = thrown_message(f);
  for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
}

std::vector<LayerCost> model(const std::vector<std::size_t>& block_params, std::size_t input = 100,
                             std::size_t head = 10) {
  std::vector<LayerCost> layers{{"input", input}};
  for (std::size_t i = 0; i < block_params.size(); ++i)
    layers.push_back({"blocks." + std::to_string(i), block_params[i]});
  layers.push_back({"head", head});
  return layers;
}

std::vector<LayerCost> small_model() { return model({50, 50, 50, 50}); }  // input 100, blocks 50 x 4, head 10

std::size_t stage_params(const std::vector<LayerCost>& layers, StageRange r) {
  std::size_t s = 0;
  for (int i = r.first; i < r.last; ++i) s += layers[i].params;
  return s;
}

std::size_t largest_stage(const std::vector<LayerCost>& layers, const std::vector<StageRange>& stages) {
  std::size_t m = 0;
  for (const auto& r : stages) m = std::max(m, stage_params(layers, r));
  return m;
}

void expect_cover(const std::vector<StageRange>& stages, int layer_count, int pp) {
  ASSERT_EQ(int(stages.size()), pp);
  EXPECT_EQ(stages.front().first, 0);
  EXPECT_EQ(stages.back().last, layer_count);
  for (std::size_t s = 0; s < stages.size(); ++s) {
    EXPECT_LT(stages[s].first, stages[s].last) << "stage " << s << " empty";
    if (s > 0) {
      EXPECT_EQ(stages[s].first, stages[s - 1].last);
    }
  }
}

std::vector<StageRange> ranges_of(const std::vector<int>& cuts, int layer_count) {
  std::vector<StageRange> r;
  int first = 0;
  for (int c : cuts) r.push_back({first, c}), first = c;
  r.push_back({first, layer_count});
  return r;
}

// The lexicographically first cut (pp - 1 increasing points in 1..n-1) whose largest stage is smallest.
std::vector<StageRange> brute_force_params(const std::vector<LayerCost>& layers, int pp) {
  const int n = int(layers.size());
  std::vector<StageRange> best;
  std::size_t best_max = std::numeric_limits<std::size_t>::max();
  std::vector<int> cuts;
  std::function<void(int)> go = [&](int from) {
    if (int(cuts.size()) == pp - 1) {
      const auto r = ranges_of(cuts, n);
      const auto m = largest_stage(layers, r);
      if (m < best_max) best_max = m, best = r;
      return;
    }
    for (int c = from; c <= n - 1; ++c) {
      cuts.push_back(c);
      go(c + 1);
      cuts.pop_back();
    }
  };
  go(1);
  return best;
}

bool same(const std::vector<StageRange>& a, const std::vector<StageRange>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](StageRange x, StageRange y) { return x.first == y.first && x.last == y.last; });
}

std::string show(const std::vector<StageRange>& r) {
  std::ostringstream o;
  for (auto s : r) o << "[" << s.first << "," << s.last << ") ";
  return o.str();
}

// ---------- partition ----------

TEST(StagePartition, ParamsMatchesBruteForceOnHandModel) {
  const auto layers = small_model();
  for (int pp : {1, 2, 3, 4, 5, 6}) {
    const auto got = partition_stages(layers, pp, "params");
    expect_cover(got, 6, pp);
    const auto want = brute_force_params(layers, pp);
    EXPECT_EQ(largest_stage(layers, got), largest_stage(layers, want)) << "pp " << pp;
    EXPECT_TRUE(same(got, want)) << "pp " << pp << ": got " << show(got) << "want " << show(want);
  }
}

TEST(StagePartition, ParamsKnownOptima) {
  const auto layers = small_model();  // 100 | 50 50 50 50 | 10, total 310
  EXPECT_EQ(largest_stage(layers, partition_stages(layers, 2, "params")), 160u);  // 100+50 | 50+50+50+10
  EXPECT_EQ(largest_stage(layers, partition_stages(layers, 3, "params")), 110u);  // 100 | 50 50 | 50 50 10
  EXPECT_EQ(largest_stage(layers, partition_stages(layers, 4, "params")), 100u);
  EXPECT_TRUE(same(partition_stages(layers, 2, "params"), ranges_of({2}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 3, "params"), ranges_of({1, 3}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 4, "params"), ranges_of({1, 2, 4}, 6)));  // earliest of the optima
}

TEST(StagePartition, ParamsMatchesBruteForceOnVariedModels) {
  unsigned state = 12345;
  const auto next = [&] { return (state = state * 1103515245u + 12345u) >> 16; };
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::size_t> blocks(1 + next() % 8);
    for (auto& b : blocks) b = next() % 5 == 0 ? 0 : 1 + next() % (trial % 2 ? 4 : 1000);  // ties when small
    const auto layers = model(blocks, next() % 300, next() % 50);
    for (int pp = 1; pp <= int(layers.size()); ++pp) {
      const auto got = partition_stages(layers, pp, "params");
      expect_cover(got, int(layers.size()), pp);
      const auto want = brute_force_params(layers, pp);
      EXPECT_TRUE(same(got, want)) << "trial " << trial << " pp " << pp << ": got " << show(got) << "want "
                                   << show(want);
    }
  }
}

TEST(StagePartition, Uniform) {
  const auto layers = small_model();  // 6 layers
  EXPECT_TRUE(same(partition_stages(layers, 1, "uniform"), ranges_of({}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 2, "uniform"), ranges_of({3}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 4, "uniform"), ranges_of({2, 4, 5}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 5, "uniform"), ranges_of({2, 3, 4, 5}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 6, "uniform"), ranges_of({1, 2, 3, 4, 5}, 6)));
  const auto deep = model(std::vector<std::size_t>(9, 1));  // 11 layers
  EXPECT_TRUE(same(partition_stages(deep, 3, "uniform"), ranges_of({4, 8}, 11)));
  EXPECT_TRUE(same(partition_stages(deep, 4, "uniform"), ranges_of({3, 6, 9}, 11)));
}

TEST(StagePartition, ExplicitNamesAndIndices) {
  const auto layers = small_model();
  EXPECT_TRUE(same(partition_stages(layers, 2, "blocks.2"), ranges_of({3}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 3, "blocks.1,blocks.3"), ranges_of({2, 4}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 3, "2,4"), ranges_of({2, 4}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 3, "blocks.0, 5"), ranges_of({1, 5}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 6, "1,2,3,4,head"), ranges_of({1, 2, 3, 4, 5}, 6)));
  EXPECT_TRUE(same(partition_stages(layers, 1, ""), ranges_of({}, 6)));
}

TEST(StagePartition, Errors) {
  const auto layers = small_model();
  expect_error([&] { partition_stages(layers, 9, "params"); },
               {"parallel.pp = 9", "6 layers", "input, blocks.0..3, head", "at least one"});
  expect_error([&] { partition_stages(layers, 7, "uniform"); }, {"parallel.pp = 7"});
  expect_error([&] { partition_stages(layers, 0, "params"); }, {"parallel.pp = 0"});
  expect_error([&] { partition_stages(layers, 2, "blocks.7"); },
               {"parallel.partition", "'blocks.7'", "input, blocks.0..3, head"});
  expect_error([&] { partition_stages(layers, 2, "paramz"); }, {"parallel.partition", "'paramz'"});
  expect_error([&] { partition_stages(layers, 3, "blocks.2"); },
               {"parallel.partition", "1 boundary", "parallel.pp = 3", "needs 2"});
  expect_error([&] { partition_stages(layers, 2, "1,2"); }, {"parallel.partition", "2 boundaries", "needs 1"});
  expect_error([&] { partition_stages(layers, 2, ""); }, {"parallel.partition", "0 boundaries", "needs 1"});
  expect_error([&] { partition_stages(layers, 2, "input"); }, {"parallel.partition", "stage 0 empty"});
  expect_error([&] { partition_stages(layers, 2, "0"); }, {"parallel.partition", "stage 0 empty"});
  expect_error([&] { partition_stages(layers, 2, "6"); }, {"parallel.partition", "index 6"});
  expect_error([&] { partition_stages(layers, 2, "99999999999999999999999"); }, {"parallel.partition"});
  expect_error([&] { partition_stages(layers, 2, "-1"); }, {"parallel.partition", "'-1'"});
  expect_error([&] { partition_stages(layers, 3, "blocks.3,blocks.1"); }, {"parallel.partition", "increasing"});
  expect_error([&] { partition_stages(layers, 3, "blocks.1,2"); }, {"parallel.partition", "increasing"});
  expect_error([&] { partition_stages(layers, 3, "blocks.1,"); }, {"parallel.partition"});
}

// ---------- schedules ----------

constexpr Schedule kSchedules[] = {Schedule::gpipe, Schedule::one_f_one_b};

TEST(PipelineSchedule, Parse) {
  EXPECT_EQ(parse_enum<Schedule>("gpipe"), Schedule::gpipe);
  EXPECT_EQ(parse_enum<Schedule>("1f1b"), Schedule::one_f_one_b);
  EXPECT_STREQ(enum_name(Schedule::gpipe), "gpipe");
  EXPECT_STREQ(enum_name(Schedule::one_f_one_b), "1f1b");
  EXPECT_FALSE(parse_enum<Schedule>("1F1B-interleaved").has_value());
  EXPECT_FALSE(parse_enum<Schedule>("").has_value());
  EXPECT_EQ(enum_words<Schedule>(), "gpipe, 1f1b");
}

TEST(PipelineSchedule, EveryStageShape) {
  for (Schedule s : kSchedules)
    for (int pp = 1; pp <= 4; ++pp)
      for (int stage = 0; stage < pp; ++stage)
        for (int m = 1; m <= 9; ++m) {
          SCOPED_TRACE(std::string(enum_name(s)) + " pp " + std::to_string(pp) + " stage " +
                       std::to_string(stage) + " m " + std::to_string(m));
          const auto acts = pipeline_actions(s, pp, stage, m);
          ASSERT_EQ(int(acts.size()), 2 * m);
          std::vector<int> forwarded(m, 0), backwarded(m, 0), backward_order, forward_order;
          int in_flight = 0, peak = 0;
          for (const auto& a : acts) {
            ASSERT_GE(a.micro_batch, 0);
            ASSERT_LT(a.micro_batch, m);
            if (a.kind == PipeAction::forward) {
              ++forwarded[a.micro_batch];
              forward_order.push_back(a.micro_batch);
              peak = std::max(peak, ++in_flight);
            } else {
              EXPECT_EQ(forwarded[a.micro_batch], 1) << "backward before forward of " << a.micro_batch;
              ++backwarded[a.micro_batch];
              backward_order.push_back(a.micro_batch);
              --in_flight;
            }
          }
          std::vector<int> in_order(m);
          std::iota(in_order.begin(), in_order.end(), 0);
          EXPECT_EQ(forwarded, std::vector<int>(m, 1));
          EXPECT_EQ(backwarded, std::vector<int>(m, 1));
          EXPECT_EQ(forward_order, in_order);
          EXPECT_EQ(backward_order, in_order);
          EXPECT_EQ(peak, max_in_flight(s, pp, stage, m));
          EXPECT_EQ(max_in_flight(s, pp, stage, m), s == Schedule::gpipe ? m : std::min(pp - stage, m));

          if (s == Schedule::gpipe) {
            for (int i = 0; i < m; ++i) EXPECT_EQ(acts[i], (PipeAction{PipeAction::forward, i}));
          } else {
            const int warm = std::min(pp - stage - 1, m);
            for (int i = 0; i < warm; ++i) EXPECT_EQ(acts[i], (PipeAction{PipeAction::forward, i}));
            for (int k = 0; k < m - warm; ++k) {  // steady: F(k + warm), B(k)
              EXPECT_EQ(acts[warm + 2 * k], (PipeAction{PipeAction::forward, k + warm}));
              EXPECT_EQ(acts[warm + 2 * k + 1], (PipeAction{PipeAction::backward, k}));
            }
            for (int i = 2 * m - warm; i < 2 * m; ++i) EXPECT_EQ(acts[i].kind, PipeAction::backward);
          }
        }
}

// Runs every stage's action list against blocking receives and non-blocking sends, each action
// starting as soon as its stage is free and its inputs exist: forward 1, backward 2 time units.
struct Simulation {
  bool completed = false;
  long makespan = 0;
  std::vector<long> busy;
};

Simulation simulate(Schedule s, int pp, int m) {
  constexpr long kForward = 1, kBackward = 2;
  std::vector<std::vector<PipeAction>> acts(pp);
  for (int st = 0; st < pp; ++st) acts[st] = pipeline_actions(s, pp, st, m);
  constexpr long kNotYet = -1;
  std::vector<std::vector<long>> fwd_done(pp, std::vector<long>(m, kNotYet)), bwd_done = fwd_done;
  std::vector<std::size_t> next(pp, 0);
  std::vector<long> clock(pp, 0);
  Simulation sim;
  sim.busy.assign(pp, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < pp; ++st) {  // lockstep: each stage tries its next action once per round
      if (next[st] == acts[st].size()) continue;
      const auto a = acts[st][next[st]];
      const int i = a.micro_batch;
      long ready = clock[st];
      if (a.kind == PipeAction::forward) {
        if (st > 0) {
          if (fwd_done[st - 1][i] == kNotYet) continue;  // blocked on recv of the input
          ready = std::max(ready, fwd_done[st - 1][i]);
        }
        clock[st] = fwd_done[st][i] = ready + kForward;
        sim.busy[st] += kForward;
      } else {
        if (fwd_done[st][i] == kNotYet) continue;
        if (st + 1 < pp) {
          if (bwd_done[st + 1][i] == kNotYet) continue;  // blocked on recv of the output gradient
          ready = std::max(ready, bwd_done[st + 1][i]);
        }
        clock[st] = bwd_done[st][i] = ready + kBackward;
        sim.busy[st] += kBackward;
      }
      ++next[st];
      progress = true;
    }
  }
  sim.completed = true;
  for (int st = 0; st < pp; ++st) sim.completed = sim.completed && next[st] == acts[st].size();
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  return sim;
}

TEST(PipelineSchedule, WholePipelineCompletesWithIdealBubble) {
  for (Schedule s : kSchedules)
    for (int pp = 1; pp <= 4; ++pp)
      for (int m = 1; m <= 9; ++m) {
        SCOPED_TRACE(std::string(enum_name(s)) + " pp " + std::to_string(pp) + " m " + std::to_string(m));
        const auto sim = simulate(s, pp, m);
        ASSERT_TRUE(sim.completed) << "deadlock";
        EXPECT_EQ(sim.makespan, 3L * (m + pp - 1));
        for (int st = 0; st < pp; ++st) {
          const long idle = sim.makespan - sim.busy[st];
          EXPECT_EQ(idle * (m + pp - 1), long(pp - 1) * sim.makespan) << "stage " << st;  // exact
          EXPECT_DOUBLE_EQ(double(idle) / double(sim.makespan), ideal_bubble(pp, m)) << "stage " << st;
        }
      }
}

TEST(PipelineSchedule, IdealBubbleValues) {
  EXPECT_DOUBLE_EQ(ideal_bubble(1, 4), 0.0);
  EXPECT_DOUBLE_EQ(ideal_bubble(4, 1), 0.75);
  EXPECT_DOUBLE_EQ(ideal_bubble(4, 8), 3.0 / 11.0);
}

// ---------- timeline ----------

using Clock = Timeline::Clock;

TEST(Timeline, DisabledRecordsNothing) {
  Timeline t(false, Clock::now(), 0);
  EXPECT_FALSE(t.enabled());
  t.span("forward", "forward", Clock::now(), Clock::now(), 1, 0);
  EXPECT_EQ(t.events_json(), "");
}

TEST(Timeline, EnabledSpansAreChromeCompleteEvents) {
  const auto epoch = Clock::now();
  Timeline t(true, epoch, 3);
  EXPECT_EQ(t.events_json(), "");
  t.span("forward \"mb\" 0", "forward", epoch + std::chrono::microseconds(10), epoch + std::chrono::microseconds(35),
         7, 0);
  t.span("optimizer", "optimizer", epoch + std::chrono::milliseconds(2), epoch + std::chrono::milliseconds(5), 7);
  std::string wrapped = "[";  // (not "[" + ...: GCC 12 warns falsely of overlapping copies there)
  wrapped += t.events_json();
  wrapped += "]";
  const auto events = nlohmann::json::parse(wrapped);
  ASSERT_EQ(events.size(), 2u);
  for (const auto& e : events) {
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_EQ(e.at("pid"), 3);
    EXPECT_EQ(e.at("tid"), 0);
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    EXPECT_EQ(e.at("args").at("step"), 7);
  }
  EXPECT_EQ(events[0].at("name"), "forward \"mb\" 0");
  EXPECT_EQ(events[0].at("cat"), "forward");
  EXPECT_DOUBLE_EQ(events[0].at("ts").get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(events[0].at("dur").get<double>(), 25.0);
  EXPECT_EQ(events[0].at("args").at("micro_batch"), 0);
  EXPECT_EQ(events[1].at("cat"), "optimizer");
  EXPECT_DOUBLE_EQ(events[1].at("ts").get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(events[1].at("dur").get<double>(), 3000.0);
  EXPECT_FALSE(events[1].at("args").contains("micro_batch"));
}

TEST(Timeline, WriteGathersRanksIntoOneTrace) {
  const auto epoch = Clock::now();
  Timeline rank0(true, epoch, 0), rank1(true, epoch, 1), idle(true, epoch, 2);
  rank0.span("forward", "forward", epoch, epoch + std::chrono::microseconds(5), 1, 0);
  rank1.span("forward", "forward", epoch + std::chrono::microseconds(5), epoch + std::chrono::microseconds(9), 1, 0);
  rank1.span("backward", "backward", epoch + std::chrono::microseconds(9), epoch + std::chrono::microseconds(20), 1, 0);

  const auto dir = std::filesystem::temp_directory_path() /
                   ("avtrain_timeline_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                    std::to_string(Clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "timeline.json").string();
  Timeline::write(path, {rank0.events_json(), rank1.events_json(), idle.events_json()},
                  {"rank 0 (stage 0)", "rank 1 (stage 1)", "rank 2 \"idle\""});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::ifstream in(path);
  const auto trace = nlohmann::json::parse(in);
  std::filesystem::remove_all(dir);

  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  const auto& events = trace.at("traceEvents");
  int spans[3] = {0, 0, 0};
  std::vector<std::string> names(3);
  std::vector<int> sort_index(3, -1);
  for (const auto& e : events) {
    const int pid = e.at("pid");
    ASSERT_GE(pid, 0);
    ASSERT_LT(pid, 3);
    if (e.at("ph") == "X") ++spans[pid];
    if (e.at("ph") == "M" && e.at("name") == "process_name") names[pid] = e.at("args").at("name");
    if (e.at("ph") == "M" && e.at("name") == "process_sort_index") sort_index[pid] = e.at("args").at("sort_index");
  }
  EXPECT_EQ(spans[0], 1);
  EXPECT_EQ(spans[1], 2);
  EXPECT_EQ(spans[2], 0);
  EXPECT_EQ(names, (std::vector<std::string>{"rank 0 (stage 0)", "rank 1 (stage 1)", "rank 2 \"idle\""}));
  EXPECT_EQ(sort_index, (std::vector<int>{0, 1, 2}));
}

}  // namespace
