#pragma once
// A tensor a layer keeps from forward for its backward, stored in its type: fp32 values are taken
// over without a copy, fp16/bf16 values are kept as 16-bit patterns (half the memory). Backward reads
// them back as fp32 (exact) or hands the stored copy straight to a matrix product.
#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "core/dtype.hpp"

namespace avtrain {

class SavedTensor {
 public:
  // Keeps `values`, already rounded to `dtype`. fp32: the storage is swapped in (`values` gets this
  // tensor's old storage, to be resized before use); 16-bit: packed, `values` is left as it was.
  // Returns the fp32 values, valid until `values` or this tensor changes.
  const float* keep(Backend& be, Buffer& values, DType dtype) { return take(be, values, dtype, false); }
  // Rounds `values` to `dtype` in place, then keeps them (one pass for 16-bit types).
  const float* round_and_keep(Backend& be, Buffer& values, DType dtype) { return take(be, values, dtype, true); }
  // Keeps `values` as `write(y)` leaves them: an op that writes the Output y, `values` rounded to
  // `dtype` with this tensor's copy in the same pass (no pass of its own; fp32: no copy, the values
  // swapped in). `copy_only` (16-bit types): the op may write the copy alone, `values` its scratch.
  template <typename Write>
  const float* keep_written(Buffer& values, DType dtype, bool copy_only, Write&& write) {
    dtype_ = dtype;
    size_ = values.size();
    if (dtype == DType::f32) {
      write(fp32_out(values.data()));
      std::swap(f32_, values);
      return f32_.data();
    }
    packed_.resize(size_);
    write(copy_only ? avtrain::copy_only(values.data(), dtype, packed_.data())
                    : rounded(values.data(), dtype, packed_.data()));
    return values.data();
  }
  // The values in fp32: this tensor's own storage, or unpacked into `scratch`.
  const float* load(Backend& be, Buffer& scratch) const {
    if (dtype_ == DType::f32) return f32_.data();
    scratch.resize(size_);
    be.unpack(operand(), scratch.data(), size_);
    return scratch.data();
  }
  // As a matrix operand, in its stored type.
  Operand operand() const {
    return dtype_ == DType::f32 ? fp32(f32_.data()) : Operand{packed_.data(), dtype_};
  }
  DType dtype() const { return dtype_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * dtype_size(dtype_); }

 private:
  const float* take(Backend& be, Buffer& values, DType dtype, bool round) {
    dtype_ = dtype;
    size_ = values.size();
    if (dtype == DType::f32) {
      std::swap(f32_, values);
      return f32_.data();
    }
    packed_.resize(size_);
    if (round) be.round_to(rounded(values.data(), dtype, packed_.data()), size_);
    else be.pack(values.data(), {packed_.data(), dtype}, size_);
    return values.data();
  }

  DType dtype_ = DType::f32;
  std::size_t size_ = 0;
  Buffer f32_;
  Buffer16 packed_;
};

}  // namespace avtrain
