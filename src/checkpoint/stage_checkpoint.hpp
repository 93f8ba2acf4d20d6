#pragma once
// A run's state at a step boundary, as checkpoint files: each pipeline stage writes its own file
// (every tensor of its ParamStore by name, AdamW's moments of the trainable ones, the run's counters,
// the fingerprint of what a resumed run must match), and any cut of the layers into stages loads
// its tensors by name from whichever file holds them.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "checkpoint/checkpoint_file.hpp"
#include "model/param_store.hpp"
#include "optim/adamw.hpp"
#include "precision/loss_scaler.hpp"

namespace avtrain::checkpoint {

// The same on every rank at a step boundary.
struct Counters {
  std::int64_t next_step = 0;      // the first step a resumed run trains
  std::int64_t applied_steps = 0;  // updates applied so far: the LR schedule's position
  int adamw_updates = 0;
  LossScaler::State scaler;
  double elapsed_s = 0;            // wall time the run has trained so far, over all its starts
};

// A stage's state copied out of the step (to the host): what its file will hold. Taking one is all
// a checkpoint costs the step; writing it can then go on beside training. Kept from one checkpoint
// to the next, so that its memory is touched once.
struct StageSnapshot {
  std::vector<ParamInfo> params;
  HostFloats values, m, v;  // flat, at the ParamStore's offsets
  Counters counters;
  std::string fingerprint;
  FileImage image;  // the memory its file is built in
  // Allocates and touches the memory a snapshot of `store` and its file take, so that the first
  // checkpoint does not pay the page faults beside training (measured: a 437 MiB stage's first
  // write 3.8 s and a step 2 s slower, against 0.6 s and 0.5 s once the memory was touched).
  void reserve(const ParamStore& store);
  // Copies the values and, when `adamw` keeps the moments of every element, the moments. Under
  // ZeRO the caller has gathered the moments into m and v already (adamw null) and, when the store's
  // masters are split, the masters into `values` (the rest of the values are whole in the store).
  void take(Backend& be, ParamStore& store, AdamW* adamw, const Counters& counters, const nlohmann::json& fingerprint);
};

// Writes and commits a stage's file at `path`, built in snapshot.image (HDF5 calls take
// data::hdf5_mutex(): safe on a thread of its own beside the data reader).
// before_rename: see FileWriter::commit.
void write_stage(const std::string& path, StageSnapshot& snapshot, const std::function<void()>& before_rename = {});

class Checkpoint {
 public:
  // The stage files of one checkpoint (opened and checked now: an error names the file).
  explicit Checkpoint(const std::vector<std::string>& stage_files);
  const nlohmann::json& fingerprint() const { return fingerprint_; }
  const Counters& counters() const { return counters_; }
  // Loads every tensor of `params` and, unless adamw is null (evaluation), the moments of its
  // trainable ones, by name (of adamw's part of the buffers: the whole, or a ZeRO replica's); a
  // tensor that no file holds, or holds in another shape, is an error naming it.
  void load(Backend& be, ParamStore& params, AdamW* adamw) const;

 private:
  std::vector<FileReader> files_;
  nlohmann::json fingerprint_;
  Counters counters_;
};

// The first field where `saved` (a checkpoint's fingerprint) and `now` differ, as one line for an
// error message ("model.width: 128 in the checkpoint, 64 in this run"), or "" when they agree.
std::string fingerprint_difference(const nlohmann::json& saved, const nlohmann::json& now);

}  // namespace avtrain::checkpoint
