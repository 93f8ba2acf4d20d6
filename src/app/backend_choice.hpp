#pragma once
// The backend a rank runs on (--device) and the checks that go with the choice (--comm).
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "parallel/process_groups.hpp"
#include "parallel/topology.hpp"
#include "train/run_config.hpp"

namespace avtrain {

// cpu: the CPU backend with train.threads threads. cuda: binds this rank's GPU (local rank % GPUs
// on the node) and makes the CUDA backend; a build without CUDA, or a machine without a GPU, stops
// with one line naming why. Throws Error on a --comm that does not fit the device.
std::unique_ptr<Backend> make_backend(const RunConfig& config, const parallel::Topology& topology);

// On a GPU the backend takes its one arena of device memory now (device.arena_mb; 0: 90 % of the
// free memory, or, where R ranks of the node share the GPU, 80 % of 1/R of its memory): the run's
// tensors and the backend's scratch come from it, so nothing is allocated on the device inside the
// step loop. On the CPU nothing happens (tensors live in host memory).
void reserve_device_memory(const RunConfig& config, const parallel::Topology& topology, Backend& backend);

// nccl or mpi, after resolving auto.
bool uses_nccl(const RunConfig& config);

// On CUDA, the data-parallel group and the pipeline group move device memory: with NCCL they become
// NCCL communicators over the GPUs (the pipeline one per direction), ordered after the backend's
// compute stream; with MPI they are staged through pinned host memory (StagedCommunicator), which
// lets ranks share a GPU. The world stays MPI (it carries host data). On the CPU they stay MPI, or
// are staged through late host copies with --debug.stage_comm (the staging's test without a GPU).
// Returns what the groups now go through, for the log ("" for plain MPI on the CPU).
std::string use_device_collectives(const RunConfig& config, parallel::ProcessGroups& groups, Backend& backend);

}  // namespace avtrain
