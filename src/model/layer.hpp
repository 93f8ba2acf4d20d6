#pragma once
// A top-level layer of AVNet: the unit that a pipeline cut keeps whole. Layers pass a Flow from
// one to the next (tokens forward, their gradient backward); what forward saves for backward
// lives in a LayerState owned by the caller, one per micro-batch in flight.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.hpp"
#include "core/dtype.hpp"
#include "data/shard_set.hpp"
#include "model/activation_stats.hpp"
#include "model/context_exchange.hpp"

namespace avtrain {

enum class Mode { train, eval };
class Linear;


// What validation keeps of each sample (the last stage's head appends a micro-batch's rows): its
// logits and its set of classes (1 for each of the sample's classes: its one label, or a v2 set).
struct ScoreRows {
  std::vector<float> logits;           // [rows, classes]
  std::vector<std::uint8_t> targets;   // [rows, classes]
};

struct Flow {
  const data::MicroBatch* batch = nullptr;  // the input layer reads samples, the head labels
  Mode mode = Mode::train;
  std::int64_t step = 0;              // for messages
  bool detect_anomaly = false;        // check every module's output, forward and backward
  int B = 0, L = 0, audio_tokens = 0;
  Buffer x;                           // tokens [B, L, D]
  DType x_dtype = DType::f32;         // the type x's values are exact in (the producer's)
  Buffer dx;                          // their gradient
  Mask token_mask;                    // [B, L], 1 for a real token (the key-padding mask)
  // parallel.cp: the ranks this sample's tokens are cut over (null at cp 1). x then holds this part's
  // L tokens of a sample (model/token_parts.hpp: [audio_tokens slots | video slots]), token_mask its
  // valid ones; key_mask is the whole sequence's in the order attention gathers it [B, parts x L], and
  // pool_counts [2, B] the valid audio, then video, tokens of each sample over every part.
  ContextExchange* context = nullptr;
  Mask key_mask;
  Buffer pool_counts;
  int parts() const { return context ? context->parts() : 1; }
  // The mask of the keys attention sees (the whole sequence's).
  const std::uint8_t* keys() const { return context ? key_mask.data() : token_mask.data(); }
  float grad_scale = 1;               // backward computes the gradient of grad_scale * loss
  double loss = 0, ce_loss = 0, nce_loss = 0;
  int correct = 0;
  // Evaluation only, when set: the head appends each row's logits and set of classes.
  ScoreRows* scores = nullptr;
  ActivationStats* act_stats = nullptr;
};

struct LayerState {
  virtual ~LayerState() = default;
  virtual std::size_t bytes() const = 0;  // memory held for one micro-batch in flight
};

template <typename... T>
std::size_t total_bytes(const T&... tensors) {
  return (tensors.bytes() + ... + 0);
}

// fp32 scratch shared by the layers of a net, which run one at a time: values being computed before
// they are kept, saved tensors read back, gradients on their way. Its size does not grow with the
// micro-batches in flight.
// Also the one state that layers which recompute their forward in backward (train.recompute =
// blocks) refill there: what such a layer keeps per micro-batch is its input alone.
struct Workspace {
  static constexpr int kSlots = 12;
  Buffer slot[kSlots];
  // A gradient's 16-bit copy, written as it is rounded, read by the two products of one backward.
  Buffer16 grad16;
  // The 16-bit copy of an FP8 linear's input, read by its forward alone: the layer keeps the E4M3
  // copy the linear makes (SavedTensor's for_fp8); two, for fc1's input and output in one op.
  Buffer16 fp8_input[2];
  // parallel.cp: a 16-bit tensor on its way between this part's tokens and attention's heads.
  Buffer16 exchange16;
  std::unique_ptr<LayerState> recomputed;
  Buffer& operator[](int i) { return slot[i]; }
  // fp8_input[i] where a tensor kept in type `kept` is read in backward by an FP8 linear alone
  // (`fp8_linear`) and its copy is 16-bit; else null (the tensor kept as it is).
  Buffer16* fp8_input_for(bool fp8_linear, DType kept, int i) {
    return fp8_linear && kept != DType::f32 ? &fp8_input[i] : nullptr;
  }
  std::size_t bytes() const {
    std::size_t n = (recomputed ? recomputed->bytes() : 0) + grad16.bytes() + fp8_input[0].bytes() + fp8_input[1].bytes() +
                    exchange16.bytes();
    for (const Buffer& b : slot) n += b.bytes();
    return n;
  }
};

class Backend;

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  const std::string& name() const { return name_; }
  virtual std::unique_ptr<LayerState> make_state() const = 0;
  // Matrix-product FLOPs of a forward over B full-length samples of L tokens.
  virtual double forward_flops(int B, int L) const = 0;
  virtual void forward(Flow& flow, LayerState& state) = 0;
  virtual void backward(Flow& flow, LayerState& state) = 0;
  // Once per step, after the update: statistics gathered over the step's micro-batches (BatchNorm's)
  // are folded in. `combine` adds a buffer over the replicas; `micro_batches` counts the global
  // batch's micro-batches. Most layers have none.
  virtual void end_step(Backend& /*be*/, const std::function<void(float*, std::size_t)>& /*combine*/,
                        int /*micro_batches*/) {}
  // Appends the layer's linear modules (those precision.mode fp8 may take into FP8), in order.
  virtual void linears(std::vector<Linear*>& /*out*/) {}

 private:
  std::string name_;
};

// Records the |max| of a module's output into the flow's statistics; with detect_anomaly, a
// non-finite value stops the run naming the step, the module and the direction.
void note_activation(Backend& backend, Flow& flow, const std::string& module, const float* y,
                     std::size_t n);
// The same for an output kept only as its 16-bit copy (or fp32 values): the copy's |max|.
void note_activation(Backend& backend, Flow& flow, const std::string& module, Operand y, std::size_t n);
// With detect_anomaly, checks the gradient a module's backward produced.
void note_gradient(Backend& backend, const Flow& flow, const std::string& module, const float* dx,
                   std::size_t n);
// The same for a gradient written only as its 16-bit copy (or fp32 values): the copy's |max|, the bits
// of the rounded fp32 values' (the check of non-finite values is the same either way).
void note_gradient(Backend& backend, const Flow& flow, const std::string& module, Operand dx, std::size_t n);

}  // namespace avtrain
