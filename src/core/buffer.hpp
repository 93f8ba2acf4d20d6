#pragma once
// An owning, 64-byte aligned array: fp32 activations, gradients and parameters (Buffer), and the
// 16-bit bit patterns of fp16/bf16 tensors (Buffer16).
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <cstdint>
#include <utility>

namespace avtrain {

template <typename T>
class AlignedArray {
 public:
  AlignedArray() = default;
  explicit AlignedArray(std::size_t n) { resize(n); }
  AlignedArray(AlignedArray&& other) noexcept
      : data_(std::move(other.data_)), size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  AlignedArray& operator=(AlignedArray&& other) noexcept {
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    return *this;
  }

  // Sets the size; capacity only grows. Growing drops the contents (the new memory is zeroed);
  // staying within capacity keeps them.
  void resize(std::size_t n) {
    if (n > capacity_) {
      std::size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
      void* p = std::aligned_alloc(64, bytes);
      if (!p) throw std::bad_alloc();
      std::memset(p, 0, bytes);
      data_.reset(static_cast<T*>(p));
      capacity_ = n;
    }
    size_ = n;
  }
  void zero() { if (size_) std::memset(data_.get(), 0, size_ * sizeof(T)); }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  T& operator[](std::size_t i) { return data_.get()[i]; }
  T operator[](std::size_t i) const { return data_.get()[i]; }

 private:
  struct Free { void operator()(T* p) const { std::free(p); } };
  std::unique_ptr<T, Free> data_;
  std::size_t size_ = 0, capacity_ = 0;
};

using Buffer = AlignedArray<float>;
using Buffer16 = AlignedArray<std::uint16_t>;

}  // namespace avtrain
