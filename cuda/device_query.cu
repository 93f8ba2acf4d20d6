#include "device_query.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

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

DeviceProbe classify_devices(int driver, int runtime, int count_status, int count) {
  DeviceProbe p;
  const auto status = cudaError_t(count_status);
  if (driver == 0) {
    p.absent = "no CUDA driver installed";
  } else if (status == cudaErrorNoDevice || (status == cudaSuccess && count <= 0)) {
    p.absent = "no CUDA device";
  } else if (status != cudaSuccess) {
    const auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    p.error = std::string("CUDA: cudaGetDeviceCount: ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
              "); the driver supports CUDA " + version(driver) + ", the runtime is " + version(runtime);
  } else {
    p.count = count;
  }
  return p;
}

DeviceProbe probe_devices() {
  int driver = 0, runtime = 0, count = 0;
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t status = driver == 0 ? cudaErrorInsufficientDriver : cudaGetDeviceCount(&count);
  return classify_devices(driver, runtime, int(status), count);
}

std::size_t free_memory() {
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

std::size_t total_memory() {
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total;
}

std::string describe_device(int index) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  const double gib = double(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         std::to_string(int(gib + 0.5)) + " GiB)";
}

std::string fp8_refusal_for(int index, int compute_capability, const std::string& device) {
  if (compute_capability >= 89) return "";
  return "precision.mode fp8 needs a GPU of sm_89 or later (FP8 tensor cores: Ada, Hopper, Blackwell); GPU " +
         std::to_string(index) + " is " + device + ": use precision.mode bf16";
}

std::string fp8_refusal(int index) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  return fp8_refusal_for(index, 10 * prop.major + prop.minor, describe_device(index));
}

std::string describe_libraries() {
  const auto cuda_version = [](int v) {
    return v == 0 ? std::string("none") : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  int nccl = 0;
  ncclGetVersion(&nccl);
  const auto nccl_version = [](int v) {  // codes before 2.9 are X*1000 + Y*100 + Z
    const int base = v >= 10000 ? 10000 : 1000;
    return std::to_string(v / base) + "." + std::to_string(v % base / 100) + "." + std::to_string(v % 100);
  };
  return "CUDA runtime " + cuda_version(runtime) + " (built with " + cuda_version(CUDART_VERSION) + "), driver supports CUDA " +
         cuda_version(driver) + "\ncuBLAS " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch) +
         " (built against " + std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) + "." +
         std::to_string(CUBLAS_VER_PATCH) + ")\nNCCL " + nccl_version(nccl) + " (built against " + nccl_version(NCCL_VERSION_CODE) + ")";
}

}  // namespace avtrain::cuda
