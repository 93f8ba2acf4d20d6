#pragma once
// Named parameters in flat fp32 buffers: values (the master weights) and gradients (the main
// grads, accumulated over micro-batches), plus, in mixed precision, a working copy of the matrix
// weights in the compute type, refreshed from the masters after every update. Layers register what they need at construction and
// address it by ParamId; checkpoints, traces and option patterns speak the names.
// Every parameter has a place in the flat index space (offset .. offset + size): the gradients are
// laid out there, and so are the values unless the masters are split (ZeRO in mixed precision,
// keep_masters_of): then the fp32 masters exist for one part of that space only, the parameters
// with 16-bit working copies have no other fp32 copy, and values() holds, packed in flat order,
// the fp32 values of the rest (norms, biases, buffers, fp32_layers) whole.
// Without masters (precision.master_weights none, drop_masters) the 16-bit working copies ARE the
// parameters that have them (AdamW updates them in place, core/stochastic_round.hpp), and values()
// holds the rest packed, as when the masters are split; there is no fp32 master of anything else.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "core/dtype.hpp"

namespace avtrain {

using ParamId = int;

enum class Init { zeros, ones, normal };

struct ParamInfo {
  std::string name;              // "blocks.3.attn.qkv.weight"
  std::string module;            // "blocks.3.attn.qkv": the row of layers.csv
  std::vector<int> shape;
  std::size_t offset = 0, size = 0;
  Init init = Init::zeros;
  float init_std = 0;
  bool trainable = true;         // false: state such as BatchNorm running statistics
  bool weight_decay = true;      // false for norms and biases
  DType working = DType::f32;    // fp16/bf16: matrix products read a working copy in that type
  std::size_t working_offset = 0;
  std::size_t value_offset = 0;  // where its fp32 values are in values(): `offset` unless the masters are split
};

// The elements [begin, end) of the flat index space: under ZeRO, one replica's part.
struct FlatPart {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
  // The elements of [from, to) in this part (empty, at an edge, when none are).
  FlatPart overlap(std::size_t from, std::size_t to) const {
    const std::size_t lo = std::clamp(from, begin, end);
    return {lo, std::max(lo, std::clamp(to, begin, end))};
  }
};

class ParamStore {
 public:
  ParamId add(const std::string& module, const std::string& leaf, std::vector<int> shape, Init init,
              float init_std, bool weight_decay, bool trainable = true);
  // Allocates the buffers and initialises every parameter from (seed, name) alone, so any
  // later cut of the layer list into stages starts from the same weights. init_ulps > 0 moves each
  // randomly drawn value that many ulps up (std::nextafter): the same run, perturbed in the last bits.
  void allocate(std::uint64_t seed, int init_ulps = 0);
  // The initial values allocate() draws, into `flat` (total_size() values at the flat offsets): where
  // a run that starts from a file's weights keeps the parameters it leaves fresh.
  void draw_initial(std::vector<float>& flat, std::uint64_t seed, int init_ulps = 0) const;
  // Moves every value of the randomly initialised parameters (Init::normal) in `flat` `ulps` ulps up:
  // train.init_ulps on weights loaded from a file (model.init_from), the FP32 twin of a fine-tuning run.
  void move_drawn_ulps(std::vector<float>& flat, int ulps) const;
  // Before allocate(): matrix products read `id` from a working copy in `dtype` (f32: the master).
  void set_working_dtype(ParamId id, DType dtype);
  // Before allocate() (ZeRO): fp32 masters for the flat elements of `part` only, when some
  // parameter has a 16-bit working copy (otherwise the values are the masters, and stay whole).
  void keep_masters_of(FlatPart part);
  // Before allocate() (precision.master_weights none): no fp32 masters; the parameters with a 16-bit
  // working copy are that copy alone. A no-op when no parameter has one. keep_masters_of then splits nothing.
  void drop_masters();
  bool masterless() const { return masterless_; }
  // values() holds only the parameters without a 16-bit working copy, packed (value_offset): the
  // masters are split or there are none.
  bool values_packed() const { return split_ || masterless_; }
  // What a matrix product reads: the working copy, or the fp32 master.
  Operand operand(ParamId id) const;
  // From the masters of `part` (within master_part()), after an update: their working copies and,
  // when the masters are split, the fp32 values of the trainable parameters among them.
  void refresh(Backend& be, FlatPart part);
  // Where refresh() puts the masters of `mine` (elements of parameter p): its working copy (16-bit
  // patterns of `type`), its fp32 values (masters split, trainable), or nowhere (data null).
  struct CopyTarget {
    void* data;
    DType type;
  };
  CopyTarget copy_target(const ParamInfo& p, FlatPart mine);
  // refresh() of every master this store has (after allocation, a load and every update).
  void refresh_working(Backend& be) { refresh(be, master_part()); }
  // Every parameter's values from the host, laid out at the flat offsets (total_size() values):
  // into the masters (of their part), the fp32 values and (when the masters are split, since
  // refresh() reaches only the part) every working copy.
  void load(const std::vector<float>& flat);
  std::size_t working_bytes() const { return working_.bytes(); }
  // All this store holds: values, masters, gradients, working copies.
  std::size_t bytes() const { return values_.bytes() + masters_.bytes() + grads_.bytes() + working_.bytes(); }

  // fp32 values (a parameter without a 16-bit working copy, or any when the masters are whole).
  float* value(ParamId id) { return values_.data() + params_[id].value_offset; }
  const float* value(ParamId id) const { return values_.data() + params_[id].value_offset; }
  float* grad(ParamId id) { return grads_.data() + params_[id].offset; }
  const ParamInfo& info(ParamId id) const { return params_[id]; }
  const std::vector<ParamInfo>& params() const { return params_; }
  std::size_t total_size() const { return total_; }
  std::size_t trainable_count() const;
  void zero_grads() { grads_.zero(); }
  Buffer& values() { return values_; }
  Buffer& grads() { return grads_; }
  Buffer16& working() { return working_; }
  const Buffer16& working() const { return working_; }
  // The 16-bit type of the working copies; f32 when there are none.
  DType working_type() const;

  // The fp32 masters: flat element i (in master_part()) at masters().data() + i - master_part().begin.
  // Not to be read when masterless().
  bool masters_split() const { return split_; }
  FlatPart master_part() const { return split_ ? part_ : masterless_ ? FlatPart{} : FlatPart{0, total_}; }
  Buffer& masters() { return split_ || masterless_ ? masters_ : values_; }
  // Where the flat bounds of parts (ascending, 0 .. total_size()) fall in values() and in the working
  // copies: what an all-gather of each cuts at. Padding between parameters goes to either side.
  std::vector<std::size_t> value_bounds(const std::vector<std::size_t>& flat) const;
  std::vector<std::size_t> working_bounds(const std::vector<std::size_t>& flat) const;

 private:
  // Where each flat bound falls among the parameters with (`working`) or without a 16-bit copy, at
  // their offsets `at` in a buffer of `total`.
  std::vector<std::size_t> bounds_among(const std::vector<std::size_t>& flat, bool working,
                                        std::size_t ParamInfo::*at, std::size_t total) const;

  std::vector<ParamInfo> params_;
  std::size_t total_ = 0;
  Buffer values_, grads_;
  Buffer16 working_;
  std::size_t working_total_ = 0, values_total_ = 0;
  bool split_ = false;  // masters_ holds the masters of part_ alone
  bool masterless_ = false;  // no masters: the working copies are the parameters
  // values_total_ and every value_offset for values() that holds only the parameters without a 16-bit copy.
  void pack_values();
  FlatPart part_;
  Buffer masters_;
};

// Deterministic N(0, std^2) values keyed by (seed, name), independent of the platform's <random>.
void fill_normal_keyed(float* out, std::size_t n, std::uint64_t seed, const std::string& name, float std);

}  // namespace avtrain
