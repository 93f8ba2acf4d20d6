#pragma once
// An owning, 64-byte aligned array of floats: activations, gradients and parameter storage.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

namespace avtrain {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t n) { resize(n); }
  Buffer(Buffer&& other) noexcept
      : data_(std::move(other.data_)), size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    return *this;
  }

  // Sets the size; capacity only grows. Growing drops the contents (the new memory is zeroed);
  // staying within capacity keeps them.
  void resize(std::size_t n) {
    if (n > capacity_) {
      std::size_t bytes = ((n * sizeof(float) + 63) / 64) * 64;
      void* p = std::aligned_alloc(64, bytes);
      if (!p) throw std::bad_alloc();
      std::memset(p, 0, bytes);
      data_.reset(static_cast<float*>(p));
      capacity_ = n;
    }
    size_ = n;
  }
  void zero() { if (size_) std::memset(data_.get(), 0, size_ * sizeof(float)); }

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  float& operator[](std::size_t i) { return data_.get()[i]; }
  float operator[](std::size_t i) const { return data_.get()[i]; }

 private:
  struct Free { void operator()(float* p) const { std::free(p); } };
  std::unique_ptr<float, Free> data_;
  std::size_t size_ = 0, capacity_ = 0;
};

}  // namespace avtrain
