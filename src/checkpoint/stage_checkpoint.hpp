#pragma once
// A run's state at a step boundary, as checkpoint files: each pipeline stage writes its own file
// (every tensor of its ParamStore by name, AdamW's moments of the trainable ones, the run's counters,
// the fingerprint of what a resumed run must match), or, under ZeRO, each replica the file of its
// part; any cut of the layers into stages, at any zero setting, loads its tensors by name from
// whichever files hold them, whole or in pieces.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
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
  // precision.mode fp8: this stage's FP8 scaling states by linear module (the same on every replica),
  // written as fp8/<module> in the stage's main file; read back by name (Checkpoint::tensor).
  std::vector<std::pair<std::string, std::vector<float>>> fp8;
};

// A stage's state copied out of the step (to the host): what one of its files will hold. Taking one is
// all a checkpoint costs the step; writing it can then go on beside training. Kept from one
// checkpoint to the next, so that its memory is touched once.
//
// A stage is written whole by one rank (its file holds every tensor whole), or, under ZeRO with
// checkpoint.zero_write parallel, by each replica: the file of the replica's part holds AdamW's
// moments of its part (and, where the masters are split, the fp32 masters of its part), a tensor
// that the part holds whole as a whole dataset and one that a part boundary cuts as a piece; the
// stage's main file (replica 0's) also holds what every replica holds whole (the other values) and
// the counters.
struct StageSnapshot {
  std::vector<ParamInfo> params;
  FlatPart part;                  // the flat elements whose moments (masters) it holds
  bool main = true;               // the stage's main file: the values held whole and the counters
  bool masters_in_part = false;   // the masters are split and written by part (not in `values`)
  HostFloats values;              // main: flat, at the ParamStore's offsets
  HostFloats masters, m, v;       // of `part`, from part.begin (masters: when masters_in_part)
  Counters counters;
  std::string fingerprint;
  FileImage image;  // the memory its file is built in
  // Allocates and touches the memory a snapshot of `store` and its file take (the whole stage, or
  // the part and, main, the values), so that the first checkpoint does not pay the page faults
  // beside training (measured: a 437 MiB stage's first write 3.8 s and a step 2 s slower, against
  // 0.6 s and 0.5 s once the memory was touched).
  void reserve(const ParamStore& store, FlatPart part, bool main);
  // The whole stage: copies the values and, when `adamw` keeps the moments of every element, the
  // moments. Under ZeRO written whole, the caller has gathered the moments into m and v already
  // (adamw null) and, when the store's masters are split, the masters into `values` (the rest of
  // the values are whole in the store).
  void take(Backend& be, ParamStore& store, AdamW* adamw, const Counters& counters, const nlohmann::json& fingerprint);
  // A ZeRO replica's part (adamw's): its moments and split masters; main (replica 0): also the
  // values every replica holds whole, and the counters. No communication.
  void take_part(Backend& be, ParamStore& store, AdamW& adamw, bool main, const Counters& counters,
                 const nlohmann::json& fingerprint);

 private:
  // Into `values`: every fp32 value, or, where the masters are split, those of the parameters
  // without a 16-bit working copy (held whole on every replica); without masters, also the bf16
  // weights widened (exact: a resume rounds them back to the same bits).
  void take_whole_values(Backend& be, ParamStore& store);
};

// Writes and commits a stage's file at `path`, built in snapshot.image (HDF5 calls take
// data::hdf5_mutex(): safe on a thread of its own beside the data reader).
// before_rename: see FileWriter::commit.
void write_stage(const std::string& path, StageSnapshot& snapshot, const std::function<void()>& before_rename = {});

class Checkpoint {
 public:
  // The files of one checkpoint (opened and checked now: an error names the file); the first holds
  // the counters.
  explicit Checkpoint(const std::vector<std::string>& stage_files);
  const nlohmann::json& fingerprint() const { return fingerprint_; }
  const Counters& counters() const { return counters_; }
  // Loads every tensor of `params` and, unless adamw is null (evaluation), the moments of its
  // trainable ones, by name (of adamw's part of the buffers: the whole, or a ZeRO replica's), each
  // from the file that holds it whole or from the pieces that together hold it; a tensor that no
  // file holds, holds in another shape, or whose pieces leave a gap, is an error naming it.
  void load(Backend& be, ParamStore& params, AdamW* adamw) const;
  // The tensors under `group` ("params") that its files hold, whole or in pieces: each name (within
  // the group) with the whole tensor's shape, in name order.
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> held(const std::string& group) const;
  // Dataset `name` ("params/embed.pos") of `shape`, whole, from whichever files hold it.
  std::vector<float> tensor(const std::string& name, const std::vector<std::uint64_t>& shape) const;

 private:
  // A run of a tensor's elements in one file: the whole tensor, or a piece.
  struct Run {
    const FileReader* file;
    std::uint64_t offset, count;
  };
  // Where the elements of dataset `name` of `shape` lie: in one file whole, or in pieces that cover them
  // exactly once, in order; an error naming the file and the dataset otherwise. Reads no values.
  std::vector<Run> locate(const std::string& name, const std::vector<std::uint64_t>& shape) const;
  void read(const std::string& name, const std::vector<std::uint64_t>& shape, float* out) const;
  std::vector<FileReader> files_;
  nlohmann::json fingerprint_;
  Counters counters_;
};

// The first field where `saved` (a checkpoint's fingerprint) and `now` differ, as one line for an
// error message ("model.width: 128 in the checkpoint, 64 in this run"), or "" when they agree.
std::string fingerprint_difference(const nlohmann::json& saved, const nlohmann::json& now);

}  // namespace avtrain::checkpoint
