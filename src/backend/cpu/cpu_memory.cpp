// The CPU backend's memory is host memory.
#include "backend/cpu/cpu_backend.hpp"

namespace avtrain {

void* CpuBackend::allocate(std::size_t bytes) { return host_memory().allocate(bytes); }
void CpuBackend::deallocate(void* p) noexcept { host_memory().deallocate(p); }
void CpuBackend::upload(void* dst, const void* src, std::size_t bytes) { host_memory().upload(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, std::size_t bytes) { host_memory().download(dst, src, bytes); }
void CpuBackend::zero(void* p, std::size_t bytes) { host_memory().zero(p, bytes); }
void CpuBackend::copy(void* dst, const void* src, std::size_t bytes) { host_memory().copy(dst, src, bytes); }

}  // namespace avtrain
