#include "train/stage_runner.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "precision/fp8_layers.hpp"
#include "train/debug_faults.hpp"

namespace avtrain {

using Clock = StepWork::Clock;
using Peer = JobWatchdog::Peer;

StageRunner::StageRunner(const RunConfig& config, Backend& be, parallel::ProcessGroups& groups,
                         const PrecisionPolicy& policy, const data::SetInfo& set, parallel::StageRange stage,
                         DistributedOptimizer& optimizer, JobWatchdog& watchdog)
    : config_(config), be_(be), groups_(groups), topo_(groups.topology), policy_(policy), optimizer_(optimizer),
      params_(optimizer.params()), watchdog_(watchdog),
      net_(be, params_, config.model, set, policy, LayerRange{stage.first, stage.last}, config.train.recompute),
      link_(*groups.pipeline, groups.gradient_pipeline(), be, config.model.width),
      actions_(parallel::pipeline_actions(config.parallel.schedule, topo_.pp, topo_.pp_rank, config.train.micro_batches)),
      slot_of_(std::size_t(config.train.micro_batches), nullptr) {
  std::vector<Linear*> linears;
  for (auto& layer : net_.layers()) layer->linears(linears);
  Fp8Layers select(config.precision);
  const int depth = config.model.depth;
  // parallel.cp cuts each sample's tokens (model/token_parts.hpp): the same line on every rank where a
  // sample has fewer tokens than parts (a sample with fewer valid ones stops its forward, naming it).
  const TokenGeometry& g = net_.geometry();
  require(topo_.cp <= g.tokens, "option parallel.cp = " + std::to_string(topo_.cp) + ": a sample has " +
                                    std::to_string(g.tokens) + " tokens (" + std::to_string(g.audio_tokens) +
                                    " audio, " + std::to_string(g.video_tokens) + " video), fewer than the parts");
  if (topo_.cp > 1) context_ = std::make_unique<UlyssesExchange>(be_, *groups.context);
  fp8_ = Fp8Linears(linears, [&](const std::string& m) { return select.in_fp8(m, depth); },
                    Fp8Recipe::of(config.precision));
  // A glob of precision.fp8_layers that matches no module: a typo, where this stage holds every layer
  // (under pipeline stages a glob may match another stage's layers alone).
  for (const ParamInfo& p : params_.params()) select.note_module(p.module);
  if (topo_.pp == 1) select.require_every_glob_used();
  freeze_fp8_scale();
}

// debug.fp8_freeze_scale: the stage that holds the module freezes it; every rank learns whether one
// did (a MAX over the world: under pipeline stages the others hold other layers), so a name that is
// no FP8 linear of the run stops every rank with the same line.
void StageRunner::freeze_fp8_scale() {
  const std::string& module = config_.debug.fp8_freeze_scale;
  if (module.empty()) return;
  double found = fp8_.freeze(module) ? 1.0 : 0.0;
  if (topo_.world > 1) groups_.world->all_reduce(&found, 1, parallel::ReduceOp::max);
  if (found > 0) return;
  // The same line on every rank: the run's FP8 linears are listed where this stage holds them all.
  std::string linears;
  for (const std::string& m : fp8_.modules()) linears += (linears.empty() ? "" : ", ") + m;
  throw Error("option debug.fp8_freeze_scale = " + module + ": no FP8 linear of that name " +
              (topo_.pp > 1 ? std::string("on any stage") : "(the run's: " + (linears.empty() ? "none" : linears) + ")"));
}

void StageRunner::end_fp8_step() {
  const auto reduce = [&](parallel::ReduceOp op) {
    return [&, op](double* values, std::size_t n) {
      if (topo_.stage_size() > 1) groups_.data->all_reduce(values, n, op);
    };
  };
  fp8_.end_step(reduce(parallel::ReduceOp::max), reduce(parallel::ReduceOp::sum));
}

bool StageRunner::reads() const { return topo_.first_stage() || topo_.last_stage(); }
data::Fields StageRunner::fields() const { return topo_.first_stage() ? data::Fields::all : data::Fields::labels; }

void StageRunner::run_actions(StepWork& w) {
  for (const parallel::PipeAction& a : actions_) {
    if (a.kind == parallel::PipeAction::forward)
      forward(w, a.micro_batch);
    else  // both schedules run the backwards in order
      backward(w, a.micro_batch, a.micro_batch == config_.train.micro_batches - 1);
  }
}

// Waits for what a computation needs from a neighbour stage (`receive`, when there is one), then
// completes this rank's sends in flight: over shared memory without single-copy support a send
// moves only while its sender is inside MPI, so one left in flight would wait a whole forward or
// backward. Completing costs nothing when the receiver already waits, which is how both
// schedules are built. The time is the stage's idle time in the schedule.
template <class Receive>
void StageRunner::wait_for_neighbour(StepWork& w, int m, const char* what, Receive receive) {
  const auto t = Clock::now();
  const bool receives = receive();
  // A send in flight can be what this rank waits on (a neighbour gone): the watchdog names it, not the
  // phase before (the first stage collects the next micro-batch's data after its send).
  if (link_.sends_in_flight()) {
    std::string to;
    if (!topo_.first_stage()) to = std::to_string(topo_.in_stage(topo_.pp_rank - 1));
    if (!topo_.last_stage()) to += (to.empty() ? "" : " and ") + std::to_string(topo_.in_stage(topo_.pp_rank + 1));
    const std::string phase = "complete the sends in flight to rank" + std::string(to.find(' ') == std::string::npos ? " " : "s ") +
                             to + ", at the start";
    watchdog_.mark_micro_batch(phase.c_str(), w.step, m);
  }
  link_.finish_sends();
  if (topo_.pp == 1) return;
  w.row.add("idle_ms", StepWork::ms_since(t));
  w.timeline->span(receives ? what : "complete sends", "recv", t, Clock::now(), w.step, m);
}

void StageRunner::forward(StepWork& w, int m) {
  Slot& slot = acquire();
  slot_of_[std::size_t(m)] = &slot;
  Flow& flow = slot.flow;
  if (!topo_.first_stage())
    watchdog_.mark_micro_batch("recv activation", w.step, m, Peer::from, topo_.in_stage(topo_.pp_rank - 1));
  wait_for_neighbour(w, m, "recv activation", [&] {
    if (!topo_.first_stage()) link_.recv_activation(flow);
    return !topo_.first_stage();
  });
  if (next_m_ == m) {
    slot.batch = std::move(next_batch_);  // collected and staged by forward(m - 1)
    next_m_ = -1;
    flow.batch = &slot.batch;
  } else if (reads()) {
    watchdog_.mark_micro_batch("waiting for data", w.step, m);
    const auto t = Clock::now();
    slot.batch = w.parts[std::size_t(m)].get();
    w.row.add("data_wait_ms", StepWork::ms_since(t));
    flow.batch = &slot.batch;
  }
  flow.mode = Mode::train;
  flow.step = w.step;
  flow.detect_anomaly = config_.precision.detect_anomaly;
  flow.grad_scale = w.grad_scale;
  flow.act_stats = &w.acts;
  watchdog_.mark_micro_batch("forward", w.step, m);
  const auto t = Clock::now();
  net_.forward(flow, slot.states);
  w.timeline->span("forward", "forward", t, Clock::now(), w.step, m);
  w.act_bytes = std::max(w.act_bytes, activation_bytes());
  if (topo_.last_stage()) {
    if (!std::isfinite(flow.loss)) {
      // fp32 has no excuse for it; in fp16/bf16 an overflow is what the scaler handles.
      if (policy_.compute() == DType::f32 || config_.precision.detect_anomaly)
        throw Error("step " + std::to_string(w.step) + ": the loss of micro-batch " + std::to_string(m) +
                    " is not finite (" + std::to_string(flow.loss) + ")");
      w.loss_finite = false;
    }
    w.local_loss += flow.loss / config_.train.micro_batches;
  } else {
    watchdog_.mark_micro_batch("send activation", w.step, m, Peer::to, topo_.in_stage(topo_.pp_rank + 1));
    const auto t_send = Clock::now();
    link_.send_activation(flow);
    w.timeline->span("send activation", "send", t_send, Clock::now(), w.step, m);
  }
  // The first stage collects the next micro-batch of the step now and starts its samples' copy to
  // the device, which then runs beside this one's backward (on the CPU the copy is made at once).
  if (net_.has_input() && m + 1 < config_.train.micro_batches) {
    watchdog_.mark_micro_batch("waiting for data", w.step, m + 1);
    const auto t_data = Clock::now();
    next_batch_ = w.parts[std::size_t(m + 1)].get();
    w.row.add("data_wait_ms", StepWork::ms_since(t_data));
    next_m_ = m + 1;
    net_.stage_input(next_batch_);
  }
}

void StageRunner::backward(StepWork& w, int m, bool last_of_step) {
  Slot& slot = *slot_of_[std::size_t(m)];
  Flow& flow = slot.flow;
  if (!topo_.last_stage())
    watchdog_.mark_micro_batch("recv gradient", w.step, m, Peer::from, topo_.in_stage(topo_.pp_rank + 1));
  wait_for_neighbour(w, m, "recv gradient", [&] {
    if (!topo_.last_stage()) link_.recv_gradient(flow);
    return !topo_.last_stage();
  });
  if (w.inject_overflow && m == 0) DebugFaults::overflow(be_, params_);
  watchdog_.mark_micro_batch("backward", w.step, m);
  const auto t = Clock::now();
  if (last_of_step) {
    net_.backward(flow, slot.states, [&](std::size_t i) {
      const ParamId first = net_.param_range(i).first;
      optimizer_.gradients_final_from(first < ParamId(params_.params().size()) ? params_.info(first).offset
                                                                               : params_.total_size());
    });
  } else {
    net_.backward(flow, slot.states);
  }
  w.timeline->span("backward", "backward", t, Clock::now(), w.step, m);
  if (!topo_.first_stage()) {
    watchdog_.mark_micro_batch("send gradient", w.step, m, Peer::to, topo_.in_stage(topo_.pp_rank - 1));
    const auto t_send = Clock::now();
    link_.send_gradient(flow);
    w.timeline->span("send gradient", "send", t_send, Clock::now(), w.step, m);
  }
  slot.busy = false;
}

void StageRunner::forward_only(std::future<data::MicroBatch>* batch, ScoreRows& scores, double sums[2]) {
  Slot& slot = acquire();
  Flow& flow = slot.flow;
  if (!topo_.first_stage()) link_.recv_activation(flow);
  if (batch) {
    slot.batch = batch->get();
    flow.batch = &slot.batch;
  }
  flow.mode = Mode::eval;
  flow.act_stats = nullptr;
  flow.scores = &scores;
  net_.forward(flow, slot.states);
  flow.scores = nullptr;
  if (topo_.last_stage()) {
    sums[0] += flow.ce_loss * flow.B;
    sums[1] += flow.correct;
  } else {
    link_.send_activation(flow);
  }
  slot.busy = false;
}

// Over the stage's dp x cp ranks: each cp rank of a replica holds the statistics of that replica's
// micro-batches (cut by cp, their sums are summed over the context group before they are used), so
// the sum over the data-parallel group counts each micro-batch cp times.
void StageRunner::fold_batch_statistics() {
  const int micro_batches = config_.train.micro_batches * topo_.stage_size();
  const auto combine = [&](float* x, std::size_t n) {
    if (topo_.stage_size() > 1) groups_.data->all_reduce(x, n, DType::f32, parallel::ReduceOp::sum);
  };
  for (auto& layer : net_.layers()) layer->end_step(be_, combine, micro_batches);
}

StageRunner::Slot& StageRunner::acquire() {
  for (auto& s : slots_)
    if (!s->busy) {
      s->busy = true;
      return *s;
    }
  slots_.push_back(std::make_unique<Slot>());
  slots_.back()->states = net_.make_states();
  slots_.back()->flow.context = context_.get();
  slots_.back()->busy = true;
  return *slots_.back();
}

std::size_t StageRunner::activation_bytes() const {
  std::size_t bytes = 0;
  for (const auto& s : slots_)
    for (const auto& st : s->states) bytes += st->bytes();
  return bytes;
}

double StageRunner::flow_bytes() const {
  double bytes = 0;
  for (const auto& s : slots_) bytes += double(s->flow.x.bytes() + s->flow.dx.bytes());
  return bytes;
}

}  // namespace avtrain
