#pragma once
// What the CUDA runtime sees on this node. The CUDA backend (kernels, cuBLAS, NCCL) builds on this.
#include <cstddef>
#include <string>

namespace avtrain::cuda {

// Number of visible CUDA devices; throws avtrain::Error with the runtime's message when the
// driver or runtime cannot answer (no GPU, no driver).
int device_count();

// Bytes free on the current device (cudaMemGetInfo).
std::size_t free_memory();

// "NAME (sm_XY, N GiB)" of device `index`.
std::string describe_device(int index);

// The versions of the CUDA runtime, the driver, cuBLAS and NCCL that this process loaded, each
// beside the version it was built against, one line each; needs no GPU. A node whose libraries are
// older than the build's shows it here (the GPU bundle takes cuBLAS and NCCL from the node).
std::string describe_libraries();

}  // namespace avtrain::cuda
