#pragma once
// Named parameters in flat fp32 buffers: values (the master weights) and gradients (the main
// grads, accumulated over micro-batches), plus, in mixed precision, a working copy of the matrix
// weights in the compute type, refreshed from the masters after every update. Layers register what they need at construction and
// address it by ParamId; checkpoints, traces and option patterns speak the names.
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
};

class ParamStore {
 public:
  ParamId add(const std::string& module, const std::string& leaf, std::vector<int> shape, Init init,
              float init_std, bool weight_decay, bool trainable = true);
  // Allocates the buffers and initialises every parameter from (seed, name) alone, so any
  // later cut of the layer list into stages starts from the same weights. init_ulps > 0 moves each
  // randomly drawn value that many ulps up (std::nextafter): the same run, perturbed in the last bits.
  void allocate(std::uint64_t seed, int init_ulps = 0);
  // Before allocate(): matrix products read `id` from a working copy in `dtype` (f32: the master).
  void set_working_dtype(ParamId id, DType dtype);
  // What a matrix product reads: the working copy, or the fp32 master.
  Operand operand(ParamId id) const;
  // Rounds the masters into the working copies (after allocation and every update).
  void refresh_working(Backend& be);
  std::size_t working_bytes() const { return working_.bytes(); }

  float* value(ParamId id) { return values_.data() + params_[id].offset; }
  const float* value(ParamId id) const { return values_.data() + params_[id].offset; }
  float* grad(ParamId id) { return grads_.data() + params_[id].offset; }
  const ParamInfo& info(ParamId id) const { return params_[id]; }
  const std::vector<ParamInfo>& params() const { return params_; }
  std::size_t total_size() const { return total_; }
  std::size_t trainable_count() const;
  void zero_grads() { grads_.zero(); }
  Buffer& values() { return values_; }
  Buffer& grads() { return grads_; }

 private:
  std::vector<ParamInfo> params_;
  std::size_t total_ = 0;
  Buffer values_, grads_;
  Buffer16 working_;
  std::size_t working_total_ = 0;
};

// Deterministic N(0, std^2) values keyed by (seed, name), independent of the platform's <random>.
void fill_normal_keyed(float* out, std::size_t n, std::uint64_t seed, const std::string& name, float std);

}  // namespace avtrain
