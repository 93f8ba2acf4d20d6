#include "checkpoint/stage_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <map>
#include <optional>

#include "core/error.hpp"
#include "core/half.hpp"

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

void StageSnapshot::reserve(const ParamStore& store, FlatPart own, bool is_main) {
  const std::size_t n = store.total_size(), k = own.size();
  const std::size_t whole = is_main ? n : 0, split = own.size() < n && store.masters_split() ? k : 0;
  const std::size_t floats = whole + split + 2 * k;
  const std::size_t file = floats * sizeof(float) + (std::size_t(16) << 20);  // and HDF5's metadata
  allocating("host memory for checkpoints (the state copied out and the file built from it)",
             double(floats * sizeof(float) + file), [&] {
               values.resize(whole);  // value-initialised: touched
               masters.resize(split);
               m.resize(k);
               v.resize(k);
               image.reserve(file);
             });
  std::memset(image.data(), 0, image.capacity());
}

void StageSnapshot::take(Backend& be, ParamStore& store, AdamW* adamw, const Counters& c, const nlohmann::json& fp) {
  params = store.params();
  part = {0, store.total_size()};
  main = true;
  masters_in_part = false;
  take_whole_values(be, store);  // masters split: gathered into `values` already, the rest copied here
  if (adamw) {
    require(adamw->part().size() == store.total_size(), "internal: a snapshot of part of AdamW's moments");
    host_copy(be, adamw->first_moments(), m);
    host_copy(be, adamw->second_moments(), v);
  }
  counters = c;
  fingerprint = fp.dump();
}

void StageSnapshot::take_part(Backend& be, ParamStore& store, AdamW& adamw, bool is_main, const Counters& c,
                              const nlohmann::json& fp) {
  params = store.params();
  part = adamw.part();
  main = is_main;
  masters_in_part = store.masters_split();
  if (masters_in_part) {
    require(store.master_part().begin == part.begin && store.master_part().end == part.end,
            "internal: the masters' part is not AdamW's");
    host_copy(be, store.masters(), masters);
  }
  if (main) take_whole_values(be, store);
  host_copy(be, adamw.first_moments(), m);
  host_copy(be, adamw.second_moments(), v);
  counters = c;
  fingerprint = fp.dump();
}

void StageSnapshot::take_whole_values(Backend& be, ParamStore& store) {
  if (!store.values_packed()) {
    host_copy(be, store.values(), values);
    return;
  }
  values.resize(store.total_size());
  std::vector<std::uint16_t> bits;
  for (const ParamInfo& p : params) {
    if (!p.size) continue;
    if (p.working == DType::f32) {
      be.download(values.data() + p.offset, store.values().data() + p.value_offset, p.size * sizeof(float));
    } else if (store.masterless()) {  // the bf16 weights are the parameter: widened, exact
      bits.resize(p.size);
      be.download(bits.data(), store.working().data() + p.working_offset, p.size * sizeof(std::uint16_t));
      for (std::size_t i = 0; i < p.size; ++i)
        values[p.offset + i] = p.working == DType::bf16 ? bf16_to_float(bits[i]) : half_to_float(bits[i]);
    }
  }
}

namespace {

// Tensor `name` of p from `base` (holding the flat elements of `held` from held.begin): whole
// when `held` holds all of it, a piece when a part boundary cuts it, nothing when it holds none.
void write_held(FileWriter& w, const std::string& name, const ParamInfo& p, const float* base, FlatPart held) {
  const FlatPart piece = held.overlap(p.offset, p.offset + p.size);
  if (piece.size() == 0) return;
  const float* from = base + (piece.begin - held.begin);
  if (piece.size() == p.size)
    w.tensor(name, shape_of(p), from);
  else
    w.piece(name, shape_of(p), piece.begin - p.offset, piece.size(), from);
}

}  // namespace

void write_stage(const std::string& path, StageSnapshot& s, const std::function<void()>& before_rename) {
  FileWriter w(path, &s.image);
  for (const ParamInfo& p : s.params) {
    const std::string value = "params/" + p.name;
    if (s.masters_in_part && p.working != DType::f32)
      write_held(w, value, p, s.masters.data(), s.part);
    else if (s.main)
      w.tensor(value, shape_of(p), s.values.data() + p.offset);
    if (!p.trainable) continue;
    write_held(w, "adamw/m/" + p.name, p, s.m.data(), s.part);
    write_held(w, "adamw/v/" + p.name, p, s.v.data(), s.part);
  }
  const Counters& c = s.counters;
  w.scalar("state/next_step", c.next_step);
  if (s.main) {
    w.scalar("state/applied_steps", c.applied_steps);
    w.scalar("state/elapsed_s", c.elapsed_s);
    w.scalar("adamw/updates", std::int64_t(c.adamw_updates));
    w.scalar("scaler/scale", c.scaler.scale);
    w.scalar("scaler/growth_tracker", std::int64_t(c.scaler.growth_tracker));
    w.scalar("scaler/hysteresis_tracker", std::int64_t(c.scaler.hysteresis_tracker));
    w.scalar("scaler/skipped", c.scaler.skipped);
    for (const auto& [module, state] : c.fp8) w.tensor("fp8/" + module, {state.size()}, state.data());
  }
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
  require(fingerprint_.is_object(), "checkpoint " + first.path() + ": the fingerprint attribute is not a JSON object");
  for (const FileReader& f : files_)
    require(f.attribute("fingerprint") == first.attribute("fingerprint"),
            "checkpoint " + f.path() + ": its fingerprint differs from " + first.path() + "'s (files of two runs?)");
  // Written since the watchdog issue; a checkpoint from before it counts from zero.
  counters_.elapsed_s = first.has("state/elapsed_s") ? first.real_scalar("state/elapsed_s") : 0.0;
  // The counters a resume trusts, in the ranges a run writes them (a damaged file must not resume at a
  // negative step or with a loss scale of NaN).
  const auto counter = [&](const char* name, std::int64_t low, std::int64_t high) {
    const std::int64_t value = first.int_scalar(name);
    require(value >= low && value <= high, "checkpoint " + first.path() + ": " + name + " = " + std::to_string(value) +
                                               " is outside " + std::to_string(low) + ".." + std::to_string(high) +
                                               " (a damaged file?)");
    return value;
  };
  const auto positive_real = [&](const char* name, double value, bool zero_too) {
    require(std::isfinite(value) && (value > 0 || (zero_too && value == 0)),
            "checkpoint " + first.path() + ": " + name + " = " + std::to_string(value) + " is not a finite " +
                (zero_too ? "number >= 0" : "positive number") + " (a damaged file?)");
    return value;
  };
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  counters_.next_step = counter("state/next_step", 0, std::numeric_limits<std::int64_t>::max());
  counters_.applied_steps = counter("state/applied_steps", 0, counters_.next_step);
  counters_.elapsed_s = positive_real("state/elapsed_s", counters_.elapsed_s, true);
  counters_.adamw_updates = int(counter("adamw/updates", 0, kIntMax));
  counters_.scaler.scale = positive_real("scaler/scale", first.real_scalar("scaler/scale"), false);
  counters_.scaler.growth_tracker = int(counter("scaler/growth_tracker", 0, kIntMax));
  counters_.scaler.hysteresis_tracker = int(counter("scaler/hysteresis_tracker", -kIntMax, kIntMax));
  counters_.scaler.skipped = counter("scaler/skipped", 0, counters_.next_step);
  for (const FileReader& f : files_)
    require(f.int_scalar("state/next_step") == counters_.next_step,
            "checkpoint " + f.path() + ": written at another step than " + first.path());
}

std::vector<Checkpoint::Run> Checkpoint::locate(const std::string& name, const std::vector<std::uint64_t>& shape) const {
  std::uint64_t size = 1;
  for (const std::uint64_t d : shape) {
    require(d == 0 || size <= std::numeric_limits<std::uint64_t>::max() / d,
            "checkpoint " + files_.front().path() + ": dataset " + name + ": its shape holds more than 2^64 elements");
    size *= d;
  }
  std::vector<Run> pieces;
  for (const FileReader& f : files_) {
    if (!f.has(name)) continue;
    const std::optional<Piece> piece = f.piece(name);
    if (!piece) {
      require(f.shape(name) == shape, "checkpoint " + f.path() + ": dataset " + name +
                                          " has another shape than this model's (another model.* setting?)");
      return {{&f, 0, size}};
    }
    require(piece->shape == shape, "checkpoint " + f.path() + ": dataset " + name +
                                       " is a piece of a tensor of another shape than this model's");
    std::uint64_t count = 1;
    for (std::uint64_t d : f.shape(name)) count *= d;
    pieces.push_back({&f, piece->offset, count});
  }
  require(!pieces.empty(), "checkpoint " + files_.front().path() + ": no file of it holds " + name);
  std::sort(pieces.begin(), pieces.end(), [](const Run& a, const Run& b) { return a.offset < b.offset; });
  std::uint64_t covered = 0;
  for (const Run& h : pieces) {
    require(h.offset == covered && h.count <= size - h.offset,
            "checkpoint " + h.file->path() + ": dataset " + name + ": its pieces do not cover elements " +
                std::to_string(covered) + ".." + std::to_string(h.offset) + " of " + std::to_string(size) +
                " exactly once (a replica's file missing?)");
    covered = h.offset + h.count;
  }
  require(covered == size, "checkpoint " + pieces.back().file->path() + ": dataset " + name +
                               ": its pieces end at element " + std::to_string(covered) + " of " +
                               std::to_string(size) + " (a replica's file missing?)");
  return pieces;
}

void Checkpoint::read(const std::string& name, const std::vector<std::uint64_t>& shape, float* out) const {
  for (const Run& run : locate(name, shape)) run.file->tensor(name, out + run.offset, run.count);
}

std::vector<std::pair<std::string, std::vector<std::uint64_t>>> Checkpoint::held(const std::string& group) const {
  std::map<std::string, std::vector<std::uint64_t>> shapes;
  for (const FileReader& f : files_) {
    if (!f.has(group)) continue;
    for (const std::string& name : f.names(group)) {
      const std::string path = group + "/" + name;
      const std::optional<Piece> piece = f.piece(path);
      shapes.emplace(name, piece ? piece->shape : f.shape(path));
    }
  }
  return {shapes.begin(), shapes.end()};
}

std::vector<float> Checkpoint::tensor(const std::string& name, const std::vector<std::uint64_t>& shape) const {
  // Located before the memory is taken: a shape read from a damaged file (avtrain-export reads the shapes
  // the files hold) is refused, not allocated.
  const std::vector<Run> runs = locate(name, shape);
  std::vector<float> out(runs.empty() ? 0 : runs.back().offset + runs.back().count);
  for (const Run& run : runs) run.file->tensor(name, out.data() + run.offset, run.count);
  return out;
}

void Checkpoint::load(Backend& be, ParamStore& params, AdamW* adamw) const {
  std::vector<float> values(params.total_size(), 0.0f), m, v;
  if (adamw) m.assign(values.size(), 0.0f), v.assign(values.size(), 0.0f);
  for (const ParamInfo& p : params.params()) {
    read("params/" + p.name, shape_of(p), values.data() + p.offset);
    if (!p.trainable || !adamw) continue;
    read("adamw/m/" + p.name, shape_of(p), m.data() + p.offset);
    read("adamw/v/" + p.name, shape_of(p), v.data() + p.offset);
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
