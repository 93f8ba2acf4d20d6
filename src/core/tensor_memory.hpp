#pragma once
// Where tensors live. Buffer/Buffer16 (core/buffer.hpp) allocate from the tensor memory in use when
// they grow: host memory by default, the device's when a run on a device backend installs it for its
// duration (TensorMemoryScope), as a device context does in other frameworks. An array remembers
// the memory it came from, so it is freed there whatever is in use later. Code that fills a tensor
// on the host builds the values in host memory and uploads them (upload below), so it is right on
// any backend.
#include <cstddef>

namespace avtrain {

class TensorMemory {
 public:
  virtual ~TensorMemory() = default;
  virtual void* allocate(std::size_t bytes) = 0;  // zeroed, 256-byte aligned
  virtual void deallocate(void* p) noexcept = 0;
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void zero(void* p, std::size_t bytes) = 0;
  // dst = src, both in this memory; ordered with the backend's ops (it may return before it is done).
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // True when the host may read and write the memory directly.
  virtual bool host_accessible() const = 0;
  // The most this memory has held at once, where it keeps count (an arena); 0 where it does not.
  virtual std::size_t peak_bytes() const { return 0; }
};

// The memory new tensors come from now.
TensorMemory& tensor_memory();
// Host memory (the default).
TensorMemory& host_memory();

// Installs `memory` for new tensors until the scope ends (then the previous one is back).
class TensorMemoryScope {
 public:
  explicit TensorMemoryScope(TensorMemory& memory);
  ~TensorMemoryScope();
  TensorMemoryScope(const TensorMemoryScope&) = delete;
  TensorMemoryScope& operator=(const TensorMemoryScope&) = delete;

 private:
  TensorMemory* previous_;
};

}  // namespace avtrain
