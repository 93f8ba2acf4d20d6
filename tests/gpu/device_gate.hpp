#pragma once
// The gpu tests' gate: whether there is a GPU to test on. Only its absence (no driver installed, no
// device) skips (CTest's 77); any other CUDA error fails (1). Prints the reason either way.
#include <cstdio>

#include "device_query.hpp"

namespace avtrain::cuda {

// 0 when a device is there to test on; else the exit code (77 skipped, 1 failed), the reason printed.
inline int device_gate(const DeviceProbe& probe) {
  if (!probe.error.empty()) {
    std::printf("CUDA error: %s: FAILED\n", probe.error.c_str());
    return 1;
  }
  if (probe.count == 0) {
    std::printf("%s: skipped\n", probe.absent.c_str());
    return 77;
  }
  return 0;
}

}  // namespace avtrain::cuda
