#pragma once
// model.init_from at a fresh start: every rank loads the parameters of its stage from the safetensors
// file by name (checkpoint/pretrained_weights.hpp), leaving those model.init_skip matches at their
// fresh initial values; an error on any rank stops every rank. Rank 0 says in one line each what was
// loaded, how embed.pos was interpolated, and which tensors of the file no stage took (a warning).
#include <ostream>

#include "backend/backend.hpp"
#include "model/model_config.hpp"
#include "optim/distributed_optimizer.hpp"
#include "parallel/communicator.hpp"
#include "parallel/topology.hpp"
#include "train/run_config.hpp"

namespace avtrain {

// Collective over `world`. A glob of model.init_skip that matches no parameter of any stage is an error.
void init_from_file(const RunConfig& config, const parallel::Topology& topo, parallel::Communicator& world, Backend& be,
                    DistributedOptimizer& state, const TokenGeometry& geometry, std::ostream& log);

}  // namespace avtrain
