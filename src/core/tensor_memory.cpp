#include "core/tensor_memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace avtrain {

namespace {
class HostMemory final : public TensorMemory {
 public:
  void* allocate(std::size_t bytes) override {
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return p;
  }
  void deallocate(void* p) noexcept override { std::free(p); }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void zero(void* p, std::size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  bool host_accessible() const override { return true; }
};

HostMemory host;
TensorMemory* current = &host;
}  // namespace

TensorMemory& tensor_memory() { return *current; }
TensorMemory& host_memory() { return host; }

TensorMemoryScope::TensorMemoryScope(TensorMemory& memory) : previous_(current) { current = &memory; }
TensorMemoryScope::~TensorMemoryScope() { current = previous_; }

}  // namespace avtrain
