#pragma once
// One block of tensor memory taken up front and handed out by first fit: a device run installs it
// as the tensor memory, so no device allocation happens inside the step loop (the block's size is
// decided at start) and the high-water mark says how much the model really used.
#include <cstddef>
#include <map>
#include <string>

#include "core/tensor_memory.hpp"

namespace avtrain {

class ArenaMemory final : public TensorMemory {
 public:
  // Takes `bytes` from `parent` (rounded up to 256). `what` names the option that sets the size,
  // for the message when the arena is full.
  ArenaMemory(TensorMemory& parent, std::size_t bytes, std::string what);
  ~ArenaMemory() override;
  ArenaMemory(const ArenaMemory&) = delete;
  ArenaMemory& operator=(const ArenaMemory&) = delete;

  // First fit among the free ranges; zeroed. Throws Error naming the size option when nothing fits.
  void* allocate(std::size_t bytes) override;
  // Returns the range; neighbouring free ranges merge.
  void deallocate(void* p) noexcept override;
  void upload(void* dst, const void* host_src, std::size_t bytes) override { parent_.upload(dst, host_src, bytes); }
  void download(void* host_dst, const void* src, std::size_t bytes) override { parent_.download(host_dst, src, bytes); }
  void zero(void* p, std::size_t bytes) override { parent_.zero(p, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override { parent_.copy(dst, src, bytes); }
  bool host_accessible() const override { return parent_.host_accessible(); }

  // True when p lies inside this arena's block.
  bool contains(const void* p) const {
    return static_cast<const char*>(p) >= base_ && static_cast<const char*>(p) < base_ + capacity_;
  }
  std::size_t capacity() const { return capacity_; }
  std::size_t in_use() const { return in_use_; }
  std::size_t peak_bytes() const override { return peak_; }  // highest in_use so far

 private:
  TensorMemory& parent_;
  std::string what_;
  char* base_;
  std::size_t capacity_, in_use_ = 0, peak_ = 0;
  std::map<std::size_t, std::size_t> free_;  // offset -> size, ranges neither overlapping nor touching
  std::map<std::size_t, std::size_t> used_;  // offset -> size
};

}  // namespace avtrain
