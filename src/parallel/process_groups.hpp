#pragma once
// The communicators of a run: the world; the data-parallel group of this rank's stage (the ranks
// with its pp_rank, all dp x cp of them, ranked by stage_rank(): gradients, ZeRO parts, BatchNorm
// statistics and FP8 amaxes go over it, the cp ranks of a replica counting as more replicas); the
// context group of its replica (the ranks with its pp_rank and dp_rank, ranked by cp_rank: the
// exchange of token parts); the pipeline group of its replica's part (the ranks with its dp_rank and
// cp_rank, ranked by pp_rank); with the topology that says which is which.
#include <memory>

#include "parallel/communicator.hpp"
#include "parallel/topology.hpp"

namespace avtrain::parallel {

struct ProcessGroups {
  Topology topology;
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> data;      // size dp x cp, rank stage_rank()
  std::unique_ptr<Communicator> context;   // size cp, rank cp_rank (size 1 at cp 1)
  std::unique_ptr<Communicator> pipeline;  // size pp, rank pp_rank: activations to the next stage
  // The same ranks, for gradients to the previous stage where that direction needs a communicator
  // of its own (NCCL has no tags); null where `pipeline` carries both (MPI).
  std::unique_ptr<Communicator> pipeline_gradients;
  Communicator& gradient_pipeline() const { return pipeline_gradients ? *pipeline_gradients : *pipeline; }
};

// After MPI_Init_thread: splits MPI_COMM_WORLD by the topology (Topology::of(world, rank, pp, dp, cp))
// and fills local_rank/local_size from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
// Throws Error (the same on every rank) when world != pp x dp x cp.
ProcessGroups make_mpi_process_groups(int pp, int dp, int cp = 1);

}  // namespace avtrain::parallel
