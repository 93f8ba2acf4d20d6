#pragma once
// Which GPU this rank drives: the node-local rank modulo the GPUs this rank sees. Called once per
// process, before any CUDA allocation, stream or NCCL communicator is made.
#include <string>

#include "parallel/topology.hpp"

namespace avtrain::cuda {

// Sets and returns the device. Throws Error (one line naming the rank) when no CUDA device is
// visible, or, with nccl, when this node runs more ranks than it has GPUs.
int bind_device(const parallel::Topology& t, bool nccl);

// How many ranks of this node drive this rank's GPU (itself included): 1 unless ranks outnumber
// the GPUs, which --comm mpi allows.
int ranks_sharing_device(const parallel::Topology& t);

// "rank R (node-local L of N) -> GPU d of n: NAME (sm_XY, N GiB)", for the log.
std::string describe_binding(const parallel::Topology& t, int device);

}  // namespace avtrain::cuda
