#include "core/arena_memory.hpp"

#include <algorithm>
#include <iterator>

#include "core/error.hpp"

namespace avtrain {

namespace {
constexpr std::size_t kAlign = 256;
std::size_t round_up(std::size_t n) { return (std::max<std::size_t>(n, 1) + kAlign - 1) / kAlign * kAlign; }
std::string mib(std::size_t bytes) { return std::to_string(bytes / (1024 * 1024)) + " MiB"; }
}  // namespace

ArenaMemory::ArenaMemory(TensorMemory& parent, std::size_t bytes, std::string what)
    : parent_(parent), what_(std::move(what)), capacity_(round_up(bytes)) {
  base_ = static_cast<char*>(parent_.allocate(capacity_));
  free_[0] = capacity_;
}

ArenaMemory::~ArenaMemory() { parent_.deallocate(base_); }

void* ArenaMemory::allocate(std::size_t bytes) {
  const std::size_t size = round_up(bytes);
  const auto fit = std::find_if(free_.begin(), free_.end(), [&](const auto& range) { return range.second >= size; });
  if (fit == free_.end())
    throw Error("tensor memory arena full: " + std::to_string(bytes) + " bytes asked with " + mib(in_use_) + " of " +
                mib(capacity_) + " in use; raise " + what_);
  const std::size_t offset = fit->first, left = fit->second - size;
  free_.erase(fit);
  if (left) free_[offset + size] = left;
  used_[offset] = size;
  in_use_ += size;
  peak_ = std::max(peak_, in_use_);
  parent_.zero(base_ + offset, size);
  return base_ + offset;
}

void ArenaMemory::deallocate(void* p) noexcept {
  if (!p) return;
  const auto it = used_.find(std::size_t(static_cast<char*>(p) - base_));
  if (it == used_.end()) return;  // not ours: nothing to give back
  std::size_t offset = it->first, size = it->second;
  used_.erase(it);
  in_use_ -= size;
  // Merge with the free neighbours on both sides.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += size;
      return;
    }
  }
  free_[offset] = size;
}

}  // namespace avtrain
