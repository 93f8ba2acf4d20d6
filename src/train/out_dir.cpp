#include "train/out_dir.hpp"

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"

namespace avtrain {

namespace {
// Rank 0's look at --out: true when it holds another run's traces.
bool refuses_used_out(const RunConfig& config, Checkpointing& checkpoints, const nlohmann::json& fingerprint,
                      std::ostream& log) {
  const std::string& out = config.train.out;
  if (config.overwrite) {
    const int removed = checkpoints.remove_all();
    if (removed > 0 || (!out.empty() && std::filesystem::exists(out + "/trace.csv")))
      log << "[rank 0] --overwrite: a fresh start; the traces in " << out << " and " << removed
          << " committed checkpoint(s) under " << checkpoints.dir() << " replaced\n";
    return false;
  }
  if (out.empty() || !std::filesystem::exists(out + "/trace.csv")) return false;
  if (config.resume != "auto") return true;
  nlohmann::json earlier;
  try {
    std::ifstream(out + "/run.json") >> earlier;
  } catch (const nlohmann::json::exception&) {
    return true;
  }
  if (!earlier.contains("fingerprint") || earlier["fingerprint"] != fingerprint) return true;
  log << "[rank 0] " << out << " holds this run's traces and no committed checkpoint: it starts again from step 0\n";
  return false;
}
}  // namespace

void claim_out_dir(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world,
                   Checkpointing& checkpoints, const nlohmann::json& fingerprint, bool resumed, std::ostream& log) {
  double used_out = !resumed && topo.rank == 0 && refuses_used_out(config, checkpoints, fingerprint, log);
  world.all_reduce(&used_out, 1, parallel::ReduceOp::max);
  if (used_out > 0) {
    throw Error("--out " + config.train.out + " already holds the traces of " +
                (config.resume == "none" ? std::string("a run")
                                         : std::string("another run (run.json) and no committed checkpoint to continue from")) +
                ": --resume auto (the default) continues from its newest committed checkpoint, --resume PATH from "
                "another, --overwrite starts afresh and replaces its traces and checkpoints");
  }
}

}  // namespace avtrain
