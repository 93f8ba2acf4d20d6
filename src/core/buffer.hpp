#pragma once
// An owning, aligned array in tensor memory (core/tensor_memory.hpp: host memory, or the device's
// during a device run): fp32 activations, gradients and parameters (Buffer), the 16-bit bit
// patterns of fp16/bf16 tensors (Buffer16), masks (Mask) and labels (Labels). Element access
// (operator[]) is for host memory only: tests and host-side tools.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <cstdint>
#include <utility>

#include "core/tensor_memory.hpp"

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
      TensorMemory& memory = tensor_memory();
      data_ = std::unique_ptr<T, Free>(static_cast<T*>(memory.allocate(n * sizeof(T))), Free{&memory});
      capacity_ = n;
    }
    size_ = n;
  }
  void zero() {
    if (size_) data_.get_deleter().memory->zero(data_.get(), size_ * sizeof(T));
  }
  // Copies host values in (resizing to their count) / out, wherever the array lives.
  void upload(const T* host, std::size_t n) {
    resize(n);
    if (n) data_.get_deleter().memory->upload(data_.get(), host, n * sizeof(T));
  }
  void download(T* host) const {
    if (size_) data_.get_deleter().memory->download(host, data_.get(), size_ * sizeof(T));
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  T& operator[](std::size_t i) { return data_.get()[i]; }
  T operator[](std::size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    TensorMemory* memory = nullptr;
    void operator()(T* p) const { memory->deallocate(p); }
  };
  std::unique_ptr<T, Free> data_;
  std::size_t size_ = 0, capacity_ = 0;
};

using Buffer = AlignedArray<float>;
using Buffer16 = AlignedArray<std::uint16_t>;
using Mask = AlignedArray<std::uint8_t>;
using Labels = AlignedArray<std::int32_t>;

}  // namespace avtrain
