// Lists the CUDA libraries this process loaded (against the versions it was built with) and the CUDA
// devices it sees. Exit 77 (CTest: skipped) when there is none, so a machine without a GPU reports
// the gpu tests as skipped, never as passed.
#include <cstdio>
#include <exception>

#include "device_query.hpp"

int main() {
  std::printf("%s\n", avtrain::cuda::describe_libraries().c_str());
  try {
    const int count = avtrain::cuda::device_count();
    if (count == 0) {
      std::printf("no CUDA device: skipped\n");
      return 77;
    }
    for (int i = 0; i < count; ++i) std::printf("device %d: %s\n", i, avtrain::cuda::describe_device(i).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::printf("%s: skipped\n", e.what());
    return 77;
  }
}
