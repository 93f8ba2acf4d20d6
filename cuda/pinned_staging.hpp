#pragma once
// The CUDA backend's DeviceStaging (parallel/device_staging.hpp), for --comm mpi: page-locked host
// buffers (cudaHostAlloc) and one stream of copies of its own. Every copy first waits, on the GPU,
// for the work enqueued on the compute stream so far (a bucket's copy to the host starts after the
// backward that wrote it; a copy back into a buffer after the work that last read it), so copies
// overlap the computation enqueued after them. Copies complete in the order they were enqueued.
// A CUDA error throws Error naming the call and the group.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "parallel/device_staging.hpp"

namespace avtrain::cuda {

// On the current device; `compute` is the backend's stream; `group` names the communicator.
std::unique_ptr<parallel::DeviceStaging> make_pinned_staging(cudaStream_t compute, const std::string& group);

}  // namespace avtrain::cuda
