// Lists the CUDA libraries this process loaded (against the versions it was built with) and the CUDA
// devices it sees. Exit 77 (CTest: skipped) only when there is no device to see (no driver installed,
// no device), so a machine without a GPU reports the gpu tests as skipped, never as passed; any other
// CUDA error (a driver older than the runtime, a device that cannot be used) exits 1: a failure.
//   cuda_device_check --self-test: checks that rule on the runtime's possible answers (needs no GPU).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "device_gate.hpp"
#include "device_query.hpp"

namespace {

int self_test() {
  using avtrain::cuda::classify_devices;
  struct Case {
    const char* what;
    int driver, status, count;
    const char* want;  // skipped | failed | devices
  };
  const Case cases[] = {
      {"no driver installed (this machine: 0, cudaErrorInsufficientDriver)", 0, cudaErrorInsufficientDriver, 0, "skipped"},
      {"a driver older than the runtime (CUDA 11.0 under a 13 runtime)", 11000, cudaErrorInsufficientDriver, 0, "failed"},
      {"a driver and no device (cudaErrorNoDevice)", 13000, cudaErrorNoDevice, 0, "skipped"},
      {"a driver that counts 0 devices", 13000, cudaSuccess, 0, "skipped"},
      {"devices busy or unavailable", 13000, cudaErrorDevicesUnavailable, 0, "failed"},
      {"a system not yet ready (fabric manager)", 13000, cudaErrorSystemNotReady, 0, "failed"},
      {"two devices", 13000, cudaSuccess, 2, "devices"},
  };
  int wrong = 0;
  for (const Case& c : cases) {
    const auto p = classify_devices(c.driver, 13000, c.status, c.count);
    const char* got = !p.error.empty() ? "failed" : p.count == 0 ? "skipped" : "devices";
    const bool ok = std::strcmp(got, c.want) == 0 && (c.count == 0 || p.count == c.count);
    std::printf("%s: %s%s\n", c.what, got, ok ? "" : " (WRONG)");
    wrong += !ok;
  }
  // precision.mode fp8's rule: sm_89 and later take it; below, one line naming the GPU and the option.
  const std::string a100 = avtrain::cuda::fp8_refusal_for(0, 80, "NVIDIA A100-SXM4-80GB (sm_80, 80 GiB)");
  const bool a100_ok = a100 ==
      "precision.mode fp8 needs a GPU of sm_89 or later (FP8 tensor cores: Ada, Hopper, Blackwell); GPU 0 is "
      "NVIDIA A100-SXM4-80GB (sm_80, 80 GiB): use precision.mode bf16";
  std::printf("fp8 on sm_80: %s%s\n", a100.c_str(), a100_ok ? "" : " (WRONG)");
  wrong += !a100_ok;
  for (const int sm : {86, 87})
    if (avtrain::cuda::fp8_refusal_for(1, sm, "a GPU").empty()) {
      std::printf("fp8 on sm_%d: taken (WRONG)\n", sm);
      ++wrong;
    }
  for (const int sm : {89, 90, 100, 120})
    if (!avtrain::cuda::fp8_refusal_for(0, sm, "a GPU").empty()) {
      std::printf("fp8 on sm_%d: refused (WRONG)\n", sm);
      ++wrong;
    }
  std::printf("%s\n", wrong ? "cuda_device_check --self-test: FAILED" : "cuda_device_check --self-test: ok");
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--self-test") == 0) return self_test();
  std::printf("%s\n", avtrain::cuda::describe_libraries().c_str());
  const avtrain::cuda::DeviceProbe probe = avtrain::cuda::probe_devices();
  if (const int code = avtrain::cuda::device_gate(probe); code != 0) return code;
  try {
    for (int i = 0; i < probe.count; ++i) std::printf("device %d: %s\n", i, avtrain::cuda::describe_device(i).c_str());
  } catch (const std::exception& e) {
    std::printf("CUDA error: %s: FAILED\n", e.what());
    return 1;
  }
  return 0;
}
