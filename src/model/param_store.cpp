#include "model/param_store.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.hpp"
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
  allocating("this stage's parameters: " + std::to_string(total_) + " fp32 values, their gradients, their working "
             "copies and the initial values drawn on the host",
             12.0 * double(total_) + double(working_total_) * 4.0, [&] {
               values_.resize(total_);
               grads_.resize(total_);
               working_.resize(working_total_);
               initial.assign(total_, 0.0f);  // drawn on the host, then uploaded to wherever the tensors live
             });
  values_.zero();
  grads_.zero();
  for (const ParamInfo& p : params_) {
    float* v = initial.data() + p.offset;
    switch (p.init) {
      case Init::zeros: break;
      case Init::ones: std::fill(v, v + p.size, 1.0f); break;
      case Init::normal:
        fill_normal_keyed(v, p.size, seed, p.name, p.init_std);
        for (std::size_t i = 0; i < p.size; ++i) v[i] = ulps_up(v[i], init_ulps);
        break;
    }
  }
  values_.upload(initial.data(), initial.size());
}

void ParamStore::set_working_dtype(ParamId id, DType dtype) {
  require(values_.size() == 0, "internal: working type of " + params_[id].name + " set after allocation");
  ParamInfo& p = params_[id];
  p.working = dtype;
  if (dtype == DType::f32) return;
  p.working_offset = working_total_;
  working_total_ += (p.size + 31) / 32 * 32;  // 64-byte aligned
}

Operand ParamStore::operand(ParamId id) const {
  const ParamInfo& p = params_[id];
  if (p.working == DType::f32) return fp32(value(id));
  return {working_.data() + p.working_offset, p.working};
}

void ParamStore::refresh_working(Backend& be) {
  for (ParamId id = 0; id < ParamId(params_.size()); ++id) {
    const ParamInfo& p = params_[id];
    if (p.working != DType::f32) be.pack(p.working, value(id), working_.data() + p.working_offset, p.size);
  }
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
