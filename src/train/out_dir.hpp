#pragma once
// A fresh start's claim on --out: a run never writes into the traces of another. Rank 0 looks;
// --overwrite clears the run there (its checkpoints; the traces are started anew); under --resume
// auto, traces of this same run (run.json's fingerprint) that no checkpoint was committed for are a
// start killed early, which starts again. Any other traces are another run's: refused.
#include <ostream>

#include <nlohmann/json.hpp>

#include "parallel/communicator.hpp"
#include "parallel/topology.hpp"
#include "train/checkpointing.hpp"
#include "train/run_config.hpp"

namespace avtrain {

// Every rank calls it (a collective: every rank learns rank 0's answer before rank 0 writes
// anything); resumed: the run continues from a checkpoint, and --out is its own. Throws, naming
// the ways out, when --out is refused.
void claim_out_dir(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world,
                   Checkpointing& checkpoints, const nlohmann::json& fingerprint, bool resumed, std::ostream& log);

}  // namespace avtrain
