#pragma once
// What the CUDA runtime sees on this node. The CUDA backend (kernels, cuBLAS, NCCL) builds on this.
#include <cstddef>
#include <string>

namespace avtrain::cuda {

// Number of visible CUDA devices; throws avtrain::Error with the runtime's message when the
// driver or runtime cannot answer (no GPU, no driver).
int device_count();

// What the CUDA runtime says of this node's devices. Only their absence is a reason to skip a GPU
// test: no driver installed (cudaDriverGetVersion gives 0) or no device (cudaErrorNoDevice, or a
// count of 0). Any other answer (a driver older than the runtime, a device that is busy or broken)
// is an error, which a test must report as a failure.
struct DeviceProbe {
  int count = 0;       // devices visible (0 when absent or on error)
  std::string absent;  // why there is no device, when that is all: "no CUDA driver installed", ...
  std::string error;   // the runtime's error otherwise, with the driver's and the runtime's versions
};
DeviceProbe probe_devices();
// The rule itself, on the runtime's answers: cudaDriverGetVersion's version (0: no driver), the
// runtime's version, cudaGetDeviceCount's status (a cudaError_t) and count.
DeviceProbe classify_devices(int driver_version, int runtime_version, int count_status, int count);

// Bytes free on the current device, and all its bytes (cudaMemGetInfo).
std::size_t free_memory();
std::size_t total_memory();

// "NAME (sm_XY, N GiB)" of device `index`.
std::string describe_device(int index);

// Why device `index` cannot run precision.mode fp8, in one line naming the GPU and the option; empty
// where it can (sm_89 and later: FP8 tensor cores, cuBLASLt's FP8 matmul). fp8_refusal_for is the rule
// on a compute capability (10 * major + minor) and the device's describe_device() words.
std::string fp8_refusal(int index);
std::string fp8_refusal_for(int index, int compute_capability, const std::string& device);

// The versions of the CUDA runtime, the driver, cuBLAS and NCCL that this process loaded, each
// beside the version it was built against, one line each; needs no GPU. A node whose libraries are
// older than the build's shows it here (the GPU bundle takes cuBLAS and NCCL from the node).
std::string describe_libraries();

}  // namespace avtrain::cuda
