// The CPU backend's memory is host memory.
#include <unistd.h>

#include <fstream>
#include <string>

#include "backend/cpu/cpu_backend.hpp"

namespace avtrain {

void* CpuBackend::allocate(std::size_t bytes) { return host_memory().allocate(bytes); }
void CpuBackend::deallocate(void* p) noexcept { host_memory().deallocate(p); }
void CpuBackend::upload(void* dst, const void* src, std::size_t bytes) { host_memory().upload(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, std::size_t bytes) { host_memory().download(dst, src, bytes); }
void CpuBackend::zero(void* p, std::size_t bytes) { host_memory().zero(p, bytes); }
void CpuBackend::copy(void* dst, const void* src, std::size_t bytes) { host_memory().copy(dst, src, bytes); }

// MemAvailable of /proc/meminfo (what the kernel can hand out without swapping); elsewhere the
// physical pages.
std::size_t CpuBackend::memory_for_tensors() const {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  std::size_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return std::size_t(sysconf(_SC_PHYS_PAGES)) * std::size_t(sysconf(_SC_PAGESIZE));
}

}  // namespace avtrain
