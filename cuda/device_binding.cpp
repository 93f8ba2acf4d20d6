#include "device_binding.hpp"

#include <cuda_runtime.h>

#include "core/error.hpp"
#include "device_query.hpp"

namespace avtrain::cuda {
namespace {

// main() puts "rank R:" in front of every message.
std::string prefix(const parallel::Topology&) { return "--device cuda: "; }

std::string explain(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

int visible_devices(const parallel::Topology& t) {
  const DeviceProbe probe = probe_devices();
  if (!probe.error.empty()) throw Error(prefix(t) + probe.error);  // a driver too old, a device unusable
  require(probe.count > 0, prefix(t) + "no CUDA device is visible (" + probe.absent + ")");
  return probe.count;
}

}  // namespace

int bind_device(const parallel::Topology& t, bool nccl) {
  const int count = visible_devices(t);
  require(!nccl || t.local_size <= count,
          prefix(t) + std::to_string(t.local_size) + " ranks on this node share " + std::to_string(count) +
              " GPU" + (count == 1 ? "" : "s") +
              "; NCCL hangs when two ranks drive one GPU: start at most one rank per GPU or use --comm mpi");
  const int device = t.local_rank % count;
  const cudaError_t status = cudaSetDevice(device);
  if (status != cudaSuccess)
    throw Error(prefix(t) + "cudaSetDevice(" + std::to_string(device) + ") failed (" + explain(status) + ")");
  return device;
}

int ranks_sharing_device(const parallel::Topology& t) {
  const int count = device_count();
  int sharing = 0;
  for (int r = 0; r < t.local_size; ++r) sharing += r % count == t.local_rank % count;
  return sharing > 0 ? sharing : 1;
}

std::string describe_binding(const parallel::Topology& t, int device) {
  return "rank " + std::to_string(t.rank) + " (node-local " + std::to_string(t.local_rank) + " of " +
         std::to_string(t.local_size) + ") -> GPU " + std::to_string(device) + " of " +
         std::to_string(device_count()) + ": " + describe_device(device);
}

}  // namespace avtrain::cuda
