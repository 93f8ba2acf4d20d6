#pragma once
// A run's checkpoints: where they go (checkpoint.dir, default OUT/checkpoints), when one is due
// (checkpoint.interval steps, checkpoint.minutes of wall time, the last step), writing one (each
// stage's data-parallel rank 0 writes its stage file under step-NNNNNNN/, and after every writer
// has finished rank 0 commits it: the `committed` marker, then `latest`), keeping the newest
// checkpoint.keep, and finding the one to resume from (--resume auto | none | PATH). A checkpoint
// without its `committed` marker is never loaded. Every decision is agreed over the world.
#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/stage_checkpoint.hpp"
#include "parallel/communicator.hpp"
#include "parallel/topology.hpp"
#include "train/run_config.hpp"

namespace avtrain {

class Checkpointing {
 public:
  Checkpointing(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world);

  // The checkpoint directory, or "" when the run has neither --out nor checkpoint.dir.
  const std::string& dir() const { return dir_; }
  // The committed checkpoints under dir(), oldest first (step-NNNNNNN directories).
  std::vector<std::string> committed() const;

  // Loads the checkpoint to resume from into params and adamw and returns its counters, or nullopt
  // for a fresh start. --resume PATH: that checkpoint or an error; auto: the newest committed one,
  // a damaged one reported on `log` and the previous one tried. A checkpoint of another run (its
  // fingerprint differs from `fingerprint`) is an error naming the field.
  // adamw null: the weights alone (evaluation).
  std::optional<checkpoint::Counters> resume(Backend& be, ParamStore& params, AdamW* adamw,
                                             const nlohmann::json& fingerprint, std::ostream& log);

  // The checkpoint resume() loaded ("" before, or after a fresh start).
  const std::string& loaded() const { return loaded_; }

  // Whether to write a checkpoint after `step` (the same answer on every rank).
  bool due(std::int64_t step, bool last);
  // Writes, commits and prunes the checkpoint taken after the step before counters.next_step.
  void save(Backend& be, ParamStore& params, AdamW& adamw, const checkpoint::Counters& counters,
            const nlohmann::json& fingerprint, std::ostream& log);

 private:
  std::vector<std::string> stage_files(const std::string& checkpoint) const;
  // Runs `f`; if it throws on any rank, every rank learns so. Returns the message of this rank's
  // error ("" when this rank succeeded) and whether any rank failed.
  std::pair<std::string, bool> agree(const std::function<void()>& f);

  const RunConfig& config_;
  const parallel::Topology& topo_;
  parallel::Communicator& world_;
  std::string dir_, loaded_;
  std::chrono::steady_clock::time_point last_save_;
};

}  // namespace avtrain
