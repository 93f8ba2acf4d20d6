// The trainer's stage transfers under NCCL's rules, simulated: no tags, and on each rank one FIFO
// stream per communicator, where a send and its receive complete together once both are at the
// head of their streams. The host follows the trainer's order for every action of the real
// schedules (parallel::pipeline_actions): forward = receive the activation, complete this rank's
// sends, compute, send the activation on; backward = the same with the gradient, the other way.
// Evaluation receives and sends each micro-batch and completes its sends at the end. With one
// communicator per direction (make_nccl_groups) no schedule may deadlock; with one shared
// communicator 1F1B must (which is why there are two).
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.hpp"

namespace avtrain::parallel {
namespace {

enum class Op { send, recv, finish };
struct Step {
  Op op;
  int comm = 0;  // 0: activations, 1: gradients (or 0 for both when shared)
  int peer = 0;
  int message = 0;  // micro-batch; gradients offset by 1000
};

std::vector<Step> host_program(Schedule schedule, int pp, int s, int m, bool shared) {
  const int grads = shared ? 0 : 1;
  std::vector<Step> prog;
  for (const PipeAction& a : pipeline_actions(schedule, pp, s, m)) {
    if (a.kind == PipeAction::forward) {
      if (s > 0) prog.push_back({Op::recv, 0, s - 1, a.micro_batch});
      prog.push_back({Op::finish});
      if (s + 1 < pp) prog.push_back({Op::send, 0, s + 1, a.micro_batch});
    } else {
      if (s + 1 < pp) prog.push_back({Op::recv, grads, s + 1, 1000 + a.micro_batch});
      prog.push_back({Op::finish});
      if (s > 0) prog.push_back({Op::send, grads, s - 1, 1000 + a.micro_batch});
    }
  }
  prog.push_back({Op::finish});
  return prog;
}

std::vector<Step> evaluation_program(int pp, int s, int m) {
  std::vector<Step> prog;
  for (int j = 0; j < m; ++j) {
    if (s > 0) prog.push_back({Op::recv, 0, s - 1, j});
    if (s + 1 < pp) prog.push_back({Op::send, 0, s + 1, j});
  }
  prog.push_back({Op::finish});
  return prog;
}

struct Queued {
  Op op;
  int peer, message;
  bool done = false;
};

// True when every rank runs its program to the end.
bool runs_to_the_end(const std::vector<std::vector<Step>>& progs) {
  const int pp = int(progs.size());
  std::vector<std::size_t> pc(pp, 0);
  std::map<std::pair<int, int>, std::deque<Queued>> streams;  // (rank, comm) -> FIFO
  std::vector<std::map<std::pair<int, int>, bool>> posted(pp);  // receives already enqueued
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < pp; ++r)
      while (pc[r] < progs[r].size()) {
        const Step& st = progs[r][pc[r]];
        auto& q = streams[{r, st.comm}];
        if (st.op == Op::send) {
          q.push_back({Op::send, st.peer, st.message});
        } else if (st.op == Op::recv) {
          if (!posted[r][{st.comm, st.message}]) {
            q.push_back({Op::recv, st.peer, st.message});
            posted[r][{st.comm, st.message}] = true;
            moved = true;
          }
          bool done = true;  // done once no longer queued
          for (const Queued& e : q)
            if (e.op == Op::recv && e.message == st.message) done = false;
          if (!done) break;
        } else {
          bool sends_left = false;
          for (auto& [key, fifo] : streams)
            if (key.first == r)
              for (const Queued& e : fifo) sends_left |= e.op == Op::send;
          if (sends_left) break;
        }
        ++pc[r];
        moved = true;
      }
    for (auto& [key, fifo] : streams) {
      if (fifo.empty() || fifo.front().op != Op::send) continue;
      auto& other = streams[{fifo.front().peer, key.second}];
      if (other.empty() || other.front().op != Op::recv || other.front().peer != key.first ||
          other.front().message != fifo.front().message)
        continue;
      fifo.pop_front();
      other.pop_front();
      moved = true;
    }
  }
  for (int r = 0; r < pp; ++r)
    if (pc[r] != progs[r].size()) return false;
  return true;
}

TEST(PipelineStreams, OneCommunicatorPerDirectionNeverDeadlocks) {
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b})
    for (int pp = 2; pp <= 6; ++pp)
      for (int m = 1; m <= 12; ++m) {
        std::vector<std::vector<Step>> train, eval;
        for (int s = 0; s < pp; ++s) {
          train.push_back(host_program(schedule, pp, s, m, false));
          eval.push_back(evaluation_program(pp, s, m));
        }
        EXPECT_TRUE(runs_to_the_end(train)) << enum_name(schedule) << " pp " << pp << " m " << m;
        EXPECT_TRUE(runs_to_the_end(eval)) << "evaluation pp " << pp << " m " << m;
      }
}

TEST(PipelineStreams, OneSharedTaglessCommunicatorDeadlocksIn1F1B) {
  std::vector<std::vector<Step>> progs;
  for (int s = 0; s < 2; ++s) progs.push_back(host_program(Schedule::one_f_one_b, 2, s, 4, true));
  EXPECT_FALSE(runs_to_the_end(progs)) << "the model of the streams is too lenient to tell";
}

}  // namespace
}  // namespace avtrain::parallel
