#include "train/memory_probe.hpp"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "model/av_net.hpp"
#include "model/fp8_linears.hpp"
#include "model/param_store.hpp"
#include "precision/fp8_layers.hpp"
#include "precision/precision_policy.hpp"

namespace avtrain {

namespace {
// The CPU backend without attention's arithmetic: a probe needs the sizes of what the layers keep,
// which no value changes, and at a long clip attention's L x L products are nearly all of a
// forward's time (its outputs keep whatever their memory held).
class SizesOnlyBackend final : public CpuBackend {
 public:
  void attention_forward(DType, Operand, const std::uint8_t*, float*, float*, Output, int, int, int, int) override {}
};

// parallel.cp's exchange without the other parts: the layers keep what a part keeps (its tokens,
// attention over every token for its heads), which no value changes.
class SizesOnlyExchange final : public ContextExchange {
 public:
  explicit SizesOnlyExchange(int parts) : parts_(parts) {}
  int parts() const override { return parts_; }
  int part() const override { return 0; }
  void to_heads(const void*, void*, int, int, int, std::size_t) override {}
  void to_tokens(const void*, void*, int, int, int, std::size_t) override {}
  void sum(float*, std::size_t) override {}

 private:
  int parts_;
};

// A micro-batch with every sample at full length: what the memory estimate runs.
data::MicroBatch full_length_probe(const data::SetInfo& s, int B) {
  data::MicroBatch probe;
  probe.size = B;
  probe.audio.assign(std::size_t(B) * s.audio_samples, 0.0f);
  probe.audio_len.assign(B, int(s.audio_samples));
  probe.video.assign(std::size_t(B) * s.frames * s.height * s.width * s.channels, 0);
  probe.video_len.assign(B, s.frames);
  probe.label.assign(B, 0);
  probe.index.assign(B, 0);
  return probe;
}

// Bytes each layer keeps for backward after a forward of B samples (one micro-batch in flight).
MicroBatchMemory measure(AVNet& net, const data::SetInfo& s, int B, int parts) {
  const data::MicroBatch probe = full_length_probe(s, B);
  auto states = net.make_states();
  SizesOnlyExchange exchange(parts);
  Flow flow;
  flow.batch = &probe;
  flow.context = parts > 1 ? &exchange : nullptr;
  flow.mode = Mode::train;
  net.forward(flow, states);
  MicroBatchMemory m;
  for (const auto& st : states) m.layers.push_back(st->bytes());
  m.workspace = net.workspace().bytes();
  return m;
}

// Whether every block computes in the same types: each block's modules (by their name within the
// block) take the types block 0's do, in FP8 or not alike. Registers the whole net's parameters;
// allocates nothing.
bool blocks_alike(Backend& be, const ModelConfig& model, const data::SetInfo& input, const PrecisionConfig& precision) {
  const PrecisionPolicy policy(precision);
  Fp8Layers fp8(precision);
  ParamStore params;
  AVNet net(be, params, model, input, policy);
  std::map<std::string, std::pair<DType, bool>> block0;
  for (const ParamInfo& p : params.params()) {
    if (p.module.rfind("blocks.", 0) != 0) continue;
    const std::size_t dot = p.module.find('.', 7);
    const std::string block = p.module.substr(0, dot), within = dot == std::string::npos ? "" : p.module.substr(dot);
    const std::pair<DType, bool> type{policy.of(p.module), fp8.in_fp8(p.module, model.depth)};
    if (block == "blocks.0") block0[within] = type;
    else if (!block0.count(within) || block0[within] != type) return false;
  }
  return true;
}
}  // namespace

std::size_t MicroBatchMemory::kept() const {
  std::size_t s = 0;
  for (std::size_t x : layers) s += x;
  return s;
}

MicroBatchMemory MicroBatchMemoryModel::at(int B) const {
  const auto at_b = [&](std::size_t a1, std::size_t a2) { return a1 + std::size_t(B - 1) * (a2 - a1); };
  MicroBatchMemory m;
  for (std::size_t i = 0; i < one.layers.size(); ++i) m.layers.push_back(at_b(one.layers[i], two.layers[i]));
  m.workspace = at_b(one.workspace, two.workspace);
  return m;
}

MicroBatchMemoryModel measure_micro_batches(const ModelConfig& model, const data::SetInfo& input,
                                            const PrecisionConfig& precision, Recompute recompute, std::uint64_t seed,
                                            int parts) {
  SizesOnlyBackend be;
  const bool one_block = model.depth > 1 && blocks_alike(be, model, input, precision);
  ModelConfig probed = model;
  if (one_block) probed.depth = 1;
  ParamStore params;
  AVNet net(be, params, probed, input, PrecisionPolicy(precision), {}, recompute);
  params.allocate(seed);
  params.refresh_working(be);
  // The FP8 linears, as a stage selects them (of the whole net's depth), in a step: they keep x8.
  std::vector<Linear*> linears;
  for (auto& layer : net.layers()) layer->linears(linears);
  Fp8Layers select(precision);
  Fp8Linears fp8(linears, [&](const std::string& m) { return select.in_fp8(m, model.depth); },
                 Fp8Recipe::of(precision));
  fp8.begin_step();
  MicroBatchMemoryModel m;
  m.one = measure(net, input, 1, parts);
  m.two = measure(net, input, 2, parts);
  if (one_block) {
    // input, blocks.0, head -> input, blocks.0 .. blocks.depth-1, head: each block keeps what blocks.0 does.
    for (MicroBatchMemory* b : {&m.one, &m.two}) {
      const std::size_t input_bytes = b->layers[0], block = b->layers[1], head = b->layers[2];
      b->layers.assign(std::size_t(model.depth) + 2, block);
      b->layers.front() = input_bytes;
      b->layers.back() = head;
    }
  }
  return m;
}

}  // namespace avtrain
