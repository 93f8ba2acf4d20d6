#include "model/param_store.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/tensor_memory.hpp"
#include "core/keyed_random.hpp"

namespace avtrain {
namespace {

// x moved n ulps towards +inf, as n calls of std::nextafter(x, INFINITY) would (except that a
// step through zero gives +0 where nextafter gives -0), in O(1): the bit patterns of finite floats,
// read as sign-magnitude integers, are in the order of their values. Stops at +inf.
float ulps_up(float x, int n) {
  if (n == 0 || !std::isfinite(x)) return x;
  std::int32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const std::int64_t ordered = bits >= 0 ? std::int64_t(bits) : -std::int64_t(bits & 0x7fffffff);
  const std::int64_t moved = std::min<std::int64_t>(ordered + n, 0x7f800000);  // +inf's pattern
  bits = moved >= 0 ? std::int32_t(moved) : std::int32_t(std::uint32_t(-moved) | 0x80000000u);
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

}  // namespace

ParamId ParamStore::add(const std::string& module, const std::string& leaf, std::vector<int> shape,
                        Init init, float init_std, bool weight_decay, bool trainable) {
  require(values_.size() == 0, "internal: parameter " + module + "." + leaf + " added after allocation");
  ParamInfo p;
  p.name = module + "." + leaf;
  p.module = module;
  p.shape = std::move(shape);
  p.size = 1;
  for (int d : p.shape) p.size *= std::size_t(d);
  p.offset = total_;
  p.value_offset = total_;
  p.init = init;
  p.init_std = init_std;
  p.trainable = trainable;
  p.weight_decay = weight_decay;
  // Keep every parameter 64-byte aligned inside the flat buffer.
  total_ += (p.size + 15) / 16 * 16;
  params_.push_back(std::move(p));
  return ParamId(params_.size() - 1);
}

void ParamStore::allocate(std::uint64_t seed, int init_ulps) {
  std::vector<float> initial;
  const std::size_t masters = split_ ? part_.size() : 0;
  const std::size_t values = values_packed() ? values_total_ : total_;
  allocating("this stage's parameters: " + std::to_string(total_) + " fp32 gradients, " + std::to_string(values) +
                 " fp32 values, " + std::to_string(masters) +
                 " fp32 masters of this replica's part, their working copies and the initial values drawn on the host",
             4.0 * double(total_) + 4.0 * double(values) + 4.0 * double(masters) + 2.0 * double(working_total_) +
                 4.0 * double(total_),
             [&] {
               values_.resize(values);
               grads_.resize(total_);
               working_.resize(working_total_);
               masters_.resize(masters);
               initial.assign(total_, 0.0f);  // drawn on the host, then uploaded to wherever the tensors live
             });
  values_.zero();
  grads_.zero();
  draw_initial(initial, seed, init_ulps);
  load(initial);
}

void ParamStore::draw_initial(std::vector<float>& flat, std::uint64_t seed, int init_ulps) const {
  flat.assign(total_, 0.0f);
  for (const ParamInfo& p : params_) {
    float* v = flat.data() + p.offset;
    switch (p.init) {
      case Init::zeros: break;
      case Init::ones: std::fill(v, v + p.size, 1.0f); break;
      case Init::normal: fill_normal_keyed(v, p.size, seed, p.name, p.init_std); break;
    }
  }
  move_drawn_ulps(flat, init_ulps);
}

void ParamStore::move_drawn_ulps(std::vector<float>& flat, int ulps) const {
  if (ulps == 0) return;
  for (const ParamInfo& p : params_) {
    if (p.init != Init::normal) continue;
    float* v = flat.data() + p.offset;
    for (std::size_t i = 0; i < p.size; ++i) v[i] = ulps_up(v[i], ulps);
  }
}

void ParamStore::load(const std::vector<float>& flat) {
  require(flat.size() == total_, "internal: ParamStore::load of " + std::to_string(flat.size()) + " values into " +
                                     std::to_string(total_));
  if (!values_packed()) {
    values_.upload(flat.data(), total_);
    return;
  }
  TensorMemory& memory = tensor_memory();
  std::vector<std::uint16_t> bits;
  for (const ParamInfo& p : params_) {
    const float* from = flat.data() + p.offset;
    if (p.working == DType::f32) {
      memory.upload(values_.data() + p.value_offset, from, p.size * sizeof(float));
      continue;
    }
    // Rounded to nearest even on the host: the bits Backend::pack gives.
    bits.resize(p.size);
    if (p.working == DType::f16) floats_to_half(from, bits.data(), p.size);
    else floats_to_bf16(from, bits.data(), p.size);
    memory.upload(working_.data() + p.working_offset, bits.data(), p.size * sizeof(std::uint16_t));
  }
  if (split_) masters_.upload(flat.data() + part_.begin, part_.size());
}

void ParamStore::set_working_dtype(ParamId id, DType dtype) {
  require(values_.size() == 0 && !split_, "internal: working type of " + params_[id].name + " set after allocation");
  ParamInfo& p = params_[id];
  p.working = dtype;
  if (dtype == DType::f32) return;
  p.working_offset = working_total_;
  working_total_ += (p.size + 31) / 32 * 32;  // 64-byte aligned
}

void ParamStore::keep_masters_of(FlatPart part) {
  require(values_.size() == 0, "internal: ParamStore::keep_masters_of after allocation");
  require(part.begin <= part.end && part.end <= total_, "internal: a master part outside the parameters");
  split_ = working_total_ > 0 && !masterless_;
  if (!split_) return;
  part_ = part;
  pack_values();
}

void ParamStore::drop_masters() {
  require(values_.size() == 0 && !split_, "internal: ParamStore::drop_masters after allocation or a split");
  masterless_ = working_total_ > 0;
  if (masterless_) pack_values();
}

void ParamStore::pack_values() {
  values_total_ = 0;
  for (ParamInfo& p : params_) {
    if (p.working != DType::f32) continue;
    p.value_offset = values_total_;
    values_total_ += (p.size + 15) / 16 * 16;  // 64-byte aligned, as in the flat buffers
  }
}

DType ParamStore::working_type() const {
  for (const ParamInfo& p : params_)
    if (p.working != DType::f32) return p.working;
  return DType::f32;
}

std::vector<std::size_t> ParamStore::bounds_among(const std::vector<std::size_t>& flat, bool working,
                                                  std::size_t ParamInfo::*at, std::size_t total) const {
  std::vector<std::size_t> out;
  for (std::size_t b : flat) {
    std::size_t where = total;  // past the last such parameter
    for (const ParamInfo& p : params_) {
      if ((p.working != DType::f32) != working || b >= p.offset + p.size) continue;
      where = p.*at + (b > p.offset ? b - p.offset : 0);
      break;
    }
    out.push_back(where);
  }
  return out;
}

std::vector<std::size_t> ParamStore::value_bounds(const std::vector<std::size_t>& flat) const {
  return values_packed() ? bounds_among(flat, false, &ParamInfo::value_offset, values_total_) : flat;
}

std::vector<std::size_t> ParamStore::working_bounds(const std::vector<std::size_t>& flat) const {
  return bounds_among(flat, true, &ParamInfo::working_offset, working_total_);
}

Operand ParamStore::operand(ParamId id) const {
  const ParamInfo& p = params_[id];
  if (p.working == DType::f32) return fp32(value(id));
  return {working_.data() + p.working_offset, p.working};
}

void ParamStore::refresh(Backend& be, FlatPart part) {
  if (masterless_) return;  // the working copies are the parameters: nothing to copy them from
  const FlatPart held = master_part();
  require(held.begin <= part.begin && part.end <= held.end, "internal: a refresh outside the masters this store holds");
  for (const ParamInfo& p : params_) {
    const FlatPart mine = part.overlap(p.offset, p.offset + p.size);
    if (mine.size() == 0) continue;
    const float* from = masters().data() + (mine.begin - held.begin);
    const CopyTarget to = copy_target(p, mine);
    if (!to.data) continue;
    if (to.type == DType::f32) be.copy(to.data, from, mine.size() * sizeof(float));
    else be.pack(from, {to.data, to.type}, mine.size());
  }
}

ParamStore::CopyTarget ParamStore::copy_target(const ParamInfo& p, FlatPart mine) {
  if (p.working != DType::f32) return {working_.data() + p.working_offset + (mine.begin - p.offset), p.working};
  if (values_packed() && p.trainable) return {values_.data() + p.value_offset + (mine.begin - p.offset), DType::f32};
  return {nullptr, DType::f32};
}

std::size_t ParamStore::trainable_count() const {
  std::size_t n = 0;
  for (const ParamInfo& p : params_) n += p.trainable ? p.size : 0;
  return n;
}

void fill_normal_keyed(float* out, std::size_t n, std::uint64_t seed, const std::string& name, float std) {
  KeyedRandom rng(seed, name);
  for (std::size_t i = 0; i < n; ++i) out[i] = float(std * rng.normal());
}

}  // namespace avtrain
