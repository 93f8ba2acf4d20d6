#include "checkpoint/stage_checkpoint.hpp"

#include <cstring>

#include "core/error.hpp"

namespace avtrain::checkpoint {
namespace {

std::vector<std::uint64_t> shape_of(const ParamInfo& p) {
  std::vector<std::uint64_t> shape(p.shape.begin(), p.shape.end());
  if (shape.empty()) shape.push_back(p.size);
  return shape;
}

void host_copy(Backend& be, const Buffer& b, HostFloats& host) {
  host.resize(b.size());
  if (!host.empty()) be.download(host.data(), b.data(), b.bytes());
}

}  // namespace

void StageSnapshot::reserve(const ParamStore& store) {
  const std::size_t n = store.total_size();
  const std::size_t file = 3 * n * sizeof(float) + (std::size_t(16) << 20);  // and HDF5's metadata
  allocating("host memory for checkpoints (the state copied out and the file built from it)",
             double(3 * n * sizeof(float) + file), [&] {
               for (HostFloats* h : {&values, &m, &v}) h->resize(n);  // value-initialised: touched
               image.reserve(file);
             });
  std::memset(image.data(), 0, image.capacity());
}

void StageSnapshot::take(Backend& be, ParamStore& store, AdamW* adamw, const Counters& c, const nlohmann::json& fp) {
  params = store.params();
  if (!store.masters_split()) {
    host_copy(be, store.values(), values);
  } else {  // the masters are in `values` already; the fp32 values of the rest are whole here
    values.resize(store.total_size());
    for (const ParamInfo& p : params)
      if (p.working == DType::f32 && p.size)
        be.download(values.data() + p.offset, store.values().data() + p.value_offset, p.size * sizeof(float));
  }
  if (adamw) {
    require(adamw->part().size() == store.total_size(), "internal: a snapshot of part of AdamW's moments");
    host_copy(be, adamw->first_moments(), m);
    host_copy(be, adamw->second_moments(), v);
  }
  counters = c;
  fingerprint = fp.dump();
}

void write_stage(const std::string& path, StageSnapshot& s, const std::function<void()>& before_rename) {
  FileWriter w(path, &s.image);
  for (const ParamInfo& p : s.params) {
    w.tensor("params/" + p.name, shape_of(p), s.values.data() + p.offset);
    if (!p.trainable) continue;
    w.tensor("adamw/m/" + p.name, shape_of(p), s.m.data() + p.offset);
    w.tensor("adamw/v/" + p.name, shape_of(p), s.v.data() + p.offset);
  }
  const Counters& c = s.counters;
  w.scalar("state/next_step", c.next_step);
  w.scalar("state/applied_steps", c.applied_steps);
  w.scalar("state/elapsed_s", c.elapsed_s);
  w.scalar("adamw/updates", std::int64_t(c.adamw_updates));
  w.scalar("scaler/scale", c.scaler.scale);
  w.scalar("scaler/growth_tracker", std::int64_t(c.scaler.growth_tracker));
  w.scalar("scaler/hysteresis_tracker", std::int64_t(c.scaler.hysteresis_tracker));
  w.scalar("scaler/skipped", c.scaler.skipped);
  w.attribute("fingerprint", s.fingerprint);
  w.commit(before_rename);
}

Checkpoint::Checkpoint(const std::vector<std::string>& stage_files) {
  require(!stage_files.empty(), "checkpoint: no stage files");
  for (const std::string& f : stage_files) files_.emplace_back(f);
  const FileReader& first = files_.front();
  try {
    fingerprint_ = nlohmann::json::parse(first.attribute("fingerprint"));
  } catch (const nlohmann::json::exception&) {
    throw Error("checkpoint " + first.path() + ": the fingerprint attribute is not JSON");
  }
  for (const FileReader& f : files_)
    require(f.attribute("fingerprint") == first.attribute("fingerprint"),
            "checkpoint " + f.path() + ": its fingerprint differs from " + first.path() + "'s (files of two runs?)");
  counters_.next_step = first.int_scalar("state/next_step");
  counters_.applied_steps = first.int_scalar("state/applied_steps");
  // Written since the watchdog issue; a checkpoint from before it counts from zero.
  counters_.elapsed_s = first.has("state/elapsed_s") ? first.real_scalar("state/elapsed_s") : 0.0;
  counters_.adamw_updates = int(first.int_scalar("adamw/updates"));
  counters_.scaler.scale = first.real_scalar("scaler/scale");
  counters_.scaler.growth_tracker = int(first.int_scalar("scaler/growth_tracker"));
  counters_.scaler.hysteresis_tracker = int(first.int_scalar("scaler/hysteresis_tracker"));
  counters_.scaler.skipped = first.int_scalar("scaler/skipped");
  for (const FileReader& f : files_)
    require(f.int_scalar("state/next_step") == counters_.next_step,
            "checkpoint " + f.path() + ": written at another step than " + first.path());
}

void Checkpoint::load(Backend& be, ParamStore& params, AdamW* adamw) const {
  std::vector<float> values(params.total_size(), 0.0f), m, v;
  if (adamw) m.assign(values.size(), 0.0f), v.assign(values.size(), 0.0f);
  auto holder = [&](const std::string& name) -> const FileReader& {
    for (const FileReader& f : files_)
      if (f.has(name)) return f;
    throw Error("checkpoint " + files_.front().path() + ": no file of it holds " + name);
  };
  for (const ParamInfo& p : params.params()) {
    const std::string name = "params/" + p.name;
    const FileReader& f = holder(name);
    require(f.shape(name) == shape_of(p), "checkpoint " + f.path() + ": dataset " + name +
                                              " has another shape than this model's (another model.* setting?)");
    f.tensor(name, values.data() + p.offset, p.size);
    if (!p.trainable || !adamw) continue;
    holder("adamw/m/" + p.name).tensor("adamw/m/" + p.name, m.data() + p.offset, p.size);
    holder("adamw/v/" + p.name).tensor("adamw/v/" + p.name, v.data() + p.offset, p.size);
  }
  params.load(values);
  if (!adamw) return;
  const FlatPart& part = adamw->part();
  be.upload(adamw->first_moments().data(), m.data() + part.begin, part.size() * sizeof(float));
  be.upload(adamw->second_moments().data(), v.data() + part.begin, part.size() * sizeof(float));
  adamw->set_updates(counters_.adamw_updates);
}

std::string fingerprint_difference(const nlohmann::json& saved, const nlohmann::json& now) {
  for (auto it = now.begin(); it != now.end(); ++it) {
    if (!saved.contains(it.key())) return it.key() + ": absent from the checkpoint";
    const nlohmann::json& a = saved[it.key()];
    if (a.is_object() && it->is_object()) {
      const std::string inner = fingerprint_difference(a, *it);
      if (!inner.empty()) return it.key() + "." + inner;
    } else if (a != *it) {
      return it.key() + ": " + a.dump() + " in the checkpoint, " + it->dump() + " in this run";
    }
  }
  for (auto it = saved.begin(); it != saved.end(); ++it)
    if (!now.contains(it.key())) return it.key() + ": in the checkpoint, absent from this run";
  return "";
}

}  // namespace avtrain::checkpoint
