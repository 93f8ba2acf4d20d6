// The CPU backend's memory is host memory: aligned allocations and plain copies.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cpu/cpu_backend.hpp"

namespace avtrain {

void* CpuBackend::allocate(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

void CpuBackend::deallocate(void* p) noexcept { std::free(p); }

void CpuBackend::upload(void* dst, const void* host_src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}

void CpuBackend::download(void* host_dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}

}  // namespace avtrain
