#include "device_query.hpp"

#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"

namespace avtrain::cuda {

namespace {
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}
}  // namespace

int device_count() {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  return count;
}

std::size_t free_memory() {
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

std::string describe_device(int index) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  const double gib = double(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         std::to_string(int(gib + 0.5)) + " GiB)";
}

}  // namespace avtrain::cuda
