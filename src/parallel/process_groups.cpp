#include "parallel/process_groups.hpp"

#include <mpi.h>

#include "core/error.hpp"
#include "parallel/mpi_communicator.hpp"

namespace avtrain::parallel {

ProcessGroups make_mpi_process_groups(int pp, int dp, int cp) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  require(initialized, "make_mpi_process_groups was called before MPI_Init_thread");
  MPI_Comm world_comm = MPI_COMM_NULL;
  require(MPI_Comm_dup(MPI_COMM_WORLD, &world_comm) == MPI_SUCCESS, "MPI_Comm_dup of MPI_COMM_WORLD failed");
  auto world = std::make_unique<MpiCommunicator>(world_comm, true, "world");

  ProcessGroups groups;
  // The same on every rank: a bad pp x dp x cp throws everywhere before any split can hang.
  groups.topology = Topology::of(world->size(), world->rank(), pp, dp, cp);
  Topology& t = groups.topology;
  groups.data = world->split(/*color=*/t.pp_rank, /*key=*/t.stage_rank(), "data-parallel");
  groups.context = world->split(/*color=*/t.pp_rank * t.dp + t.dp_rank, /*key=*/t.cp_rank, "context-parallel");
  groups.pipeline = world->split(/*color=*/t.stage_rank(), /*key=*/t.pp_rank, "pipeline");
  const auto node = world->split_shared_memory("node");
  t.local_rank = node->rank();
  t.local_size = node->size();
  groups.world = std::move(world);
  return groups;
}

}  // namespace avtrain::parallel
