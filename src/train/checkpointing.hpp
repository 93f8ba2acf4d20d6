#pragma once
// A run's checkpoints: where they go (checkpoint.dir, default OUT/checkpoints), when one is due
// (checkpoint.interval steps, checkpoint.minutes of wall time, the last step), writing one (each
// stage's data-parallel rank 0 copies its state out of the step and writes its stage file under
// step-NNNNNNN/ on a background thread while training goes on, and under ZeRO each replica the
// file of its part; once every writer has finished,
// rank 0 commits it: the `committed` marker, then `latest`), keeping the newest
// checkpoint.keep, and finding the one to resume from (--resume auto | none | PATH). A checkpoint
// without its `committed` marker is never loaded. Every decision is agreed over the world.
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/stage_checkpoint.hpp"
#include "model/fp8_linears.hpp"
#include "optim/distributed_optimizer.hpp"
#include "parallel/communicator.hpp"
#include "parallel/topology.hpp"
#include "train/run_config.hpp"

namespace avtrain {

class Checkpointing {
 public:
  Checkpointing(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world);

  // The checkpoint directory, or "" when the run has neither --out nor checkpoint.dir.
  const std::string& dir() const { return dir_; }
  // Whether this run writes checkpoints: a directory, and checkpoint.interval not -1.
  bool writes() const { return !dir_.empty() && config_.checkpoint.interval >= 0; }
  // Why it does not, for the logs.
  std::string why_none() const;
  // The committed checkpoints under dir(), oldest first (step-NNNNNNN directories).
  std::vector<std::string> committed() const;
  // --overwrite: removes every checkpoint under dir(), committed or not, and `latest` (rank 0, before
  // training; a later --resume auto must never find an earlier run's step). Returns how many.
  int remove_all();

  // Loads the checkpoint to resume from into the stage's state (its parameters, their working copies
  // and, with moments, AdamW's state of this replica's part) and returns its counters, or nullopt
  // for a fresh start (--resume none, --overwrite). --resume PATH: that checkpoint or an error; auto: the newest committed one,
  // a damaged one reported on `log` and the previous one tried. A checkpoint of another run (its
  // fingerprint differs from `fingerprint`) is an error naming the field.
  // moments false: the weights alone (evaluation), at any global batch.
  // fp8 (precision.mode fp8): its linears' scaling states, loaded by module name too.
  std::optional<checkpoint::Counters> resume(Backend& be, DistributedOptimizer& state, bool moments,
                                             const nlohmann::json& fingerprint, std::ostream& log,
                                             Fp8Linears* fp8 = nullptr);

  // The files of a committed checkpoint, stage 0's main file first (from its `committed` marker);
  // an Error naming the marker when it is missing or unreadable.
  static std::vector<std::string> stage_files(const std::string& checkpoint);

  // The checkpoint resume() loaded ("" before, or after a fresh start).
  const std::string& loaded() const { return loaded_; }

  // Before training: the host memory this rank's checkpoints take (a rank that writes a file only),
  // touched once now rather than beside the first checkpoint's steps.
  void reserve_memory(DistributedOptimizer& state);

  // How long a checkpoint of `params` is expected to take (the longest so far; before the first,
  // an estimate at 100 MiB/s): what a time budget keeps in hand.
  double expected_seconds(const ParamStore& params) const;

  // Whether to write a checkpoint after `step`: the last one, every checkpoint.interval steps, or
  // `by_time` (rank 0's minutes_passed, agreed over the world): the same answer on every rank.
  bool due(std::int64_t step, bool last, bool by_time) const;
  // This rank's clock: checkpoint.minutes (> 0) have passed since the last checkpoint or the start.
  bool minutes_passed() const;
  // Starts the checkpoint taken after the step before counters.next_step: waits for the one in
  // flight (and commits it), creates its directory, copies this stage's state out of the step (all
  // the step waits for) and writes it on a thread of its own. Collective. Under ZeRO (the state's
  // parts), the AdamW moments (and, in mixed precision, the fp32 masters) are split over the
  // data-parallel group (the stage's dp x cp ranks, a part each): with checkpoint.zero_write
  // parallel each rank writes the file of its part at once, with no communication; gathered, each
  // part goes to the stage's writer, a chunk at a time, which writes the stage whole.
  void save(Backend& be, DistributedOptimizer& state, const checkpoint::Counters& counters,
            const nlohmann::json& fingerprint, std::ostream& log);
  // Once per step, collective: commits the checkpoint in flight once every writer has finished.
  void poll(std::ostream& log);
  // Waits for the checkpoint in flight and commits it. Collective.
  void finish(std::ostream& log);
  ~Checkpointing();  // waits for a write in flight (uncommitted: its temporary file is removed)

 private:
  // A checkpoint written beside training: this rank's stage file (stage_rank 0 of each stage, or
  // every rank's part under the parallel write) or nothing, and what the commit line reports.
  struct InFlight {
    std::string dir;
    checkpoint::Counters counters;
    int files_per_stage = 1;    // dp x cp when each rank of the stage writes its part
    std::future<double> write;  // seconds the stage file took; invalid on ranks that do not write
    double pause_s = 0;         // how long the step waited: the copy out (and the previous write)
    double write_s = 0;         // the write's seconds, once taken from `write`
  };
  // stage-S.h5 (the stage's main file), stage-S.part-R.h5 (part R's, R > 0: the stage's rank R of dp x cp).
  static std::string stage_file_name(int stage, int replica);
  // Whether each replica writes the file of its part (ZeRO, checkpoint.zero_write parallel).
  bool by_part(const DistributedOptimizer& state) const;
  void gather_parts(Backend& be, DistributedOptimizer& state);
  // Commits the checkpoint in flight if every writer has finished (or, with wait, once they have).
  void settle(bool wait, std::ostream& log);
  void commit(const InFlight& done, std::ostream& log);
  // Runs `f`; if it throws on any rank, every rank learns so. Returns the message of this rank's
  // error ("" when this rank succeeded) and whether any rank failed.
  std::pair<std::string, bool> agree(const std::function<void()>& f);

  // debug.hold_checkpoint: where the write of which checkpoint stops for good (the kill test), and
  // the stop itself (a line on stderr, then a wait that only a kill ends).
  enum class HoldPoint { none, copy, stage_file, commit };
  HoldPoint hold_at_ = HoldPoint::none;
  std::int64_t hold_step_ = -1;
  bool holds(HoldPoint point, std::int64_t step) const { return hold_at_ == point && hold_step_ == step; }
  static std::function<void()> hold(int rank, const std::string& checkpoint, const char* point);

  const RunConfig& config_;
  const parallel::Topology& topo_;
  parallel::Communicator& world_;
  std::string dir_, loaded_;
  std::chrono::steady_clock::time_point last_save_;
  std::optional<InFlight> in_flight_;
  double longest_s_ = 0;  // the longest checkpoint so far: pause + write
  // This rank's stage state as the write in flight reads it; kept, so its memory is touched once.
  std::shared_ptr<checkpoint::StageSnapshot> snapshot_ = std::make_shared<checkpoint::StageSnapshot>();
};

}  // namespace avtrain
