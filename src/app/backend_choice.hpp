#pragma once
// The backend a rank runs on (--device) and the checks that go with the choice (--comm).
#include <memory>

#include "backend/backend.hpp"
#include "core/arena_memory.hpp"
#include "parallel/process_groups.hpp"
#include "parallel/topology.hpp"
#include "train/run_config.hpp"

namespace avtrain {

// cpu: the CPU backend with train.threads threads. cuda: binds this rank's GPU (local rank % GPUs
// on the node) and makes the CUDA backend; a build without CUDA, or a machine without a GPU, stops
// with one line naming why. Throws Error on a --comm that does not fit the device.
std::unique_ptr<Backend> make_backend(const RunConfig& config, const parallel::Topology& topology);

// The memory the run's tensors come from: on a GPU one arena taken at start (device.arena_mb; 0:
// 90 % of the free memory), so nothing is allocated on the device inside the step loop; on the CPU
// nothing (null: the backend's host memory).
std::unique_ptr<ArenaMemory> make_tensor_arena(const RunConfig& config, Backend& backend);

// nccl or mpi, after resolving auto.
bool uses_nccl(const RunConfig& config);

// With NCCL (CUDA only): the data-parallel group becomes an NCCL communicator over the GPUs,
// ordered after the backend's compute stream; the pipeline group stays MPI (stage transfers go
// through host memory for now). A device backend with MPI collectives is refused when several
// ranks train: MPI here moves host memory.
void use_device_collectives(const RunConfig& config, parallel::ProcessGroups& groups, Backend& backend);

}  // namespace avtrain
