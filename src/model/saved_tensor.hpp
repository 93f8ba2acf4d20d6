#pragma once
// A tensor a layer keeps from forward for its backward, stored in its type: fp32 values are taken
// over without a copy, fp16/bf16 values are kept as 16-bit patterns (half the memory). Backward reads
// them back as fp32 (exact) or hands the stored copy straight to a matrix product.
// A tensor that only an FP8 linear reads in backward (its input x, for wgrad) is kept as the E4M3 copy
// the linear's forward made of it, 1 byte an element with its scale: the 16-bit copy is then written
// to `for_fp8`, the workspace's (round_and_keep, keep_written), read from there by the linear's
// forward (operand()), and the linear keeps its codes here (Linear::forward's `keep_x8`: fp8_codes,
// kept_fp8) — the same codes backward would get quantizing the 16-bit copy again with the scale.
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
  // Rounds `values` to `dtype` in place, then keeps them (one pass for 16-bit types); the 16-bit copy
  // in `for_fp8` when given (see above).
  const float* round_and_keep(Backend& be, Buffer& values, DType dtype, Buffer16* for_fp8 = nullptr) {
    return take(be, values, dtype, true, for_fp8);
  }
  // Keeps `values` as `write(y)` leaves them: an op that writes the Output y, `values` rounded to
  // `dtype` with this tensor's copy in the same pass (no pass of its own; fp32: no copy, the values
  // swapped in). `copy_only` (16-bit types): the op may write the copy alone, `values` its scratch.
  // The 16-bit copy in `for_fp8` when given (see above).
  template <typename Write>
  const float* keep_written(Buffer& values, DType dtype, bool copy_only, Write&& write, Buffer16* for_fp8 = nullptr) {
    dtype_ = dtype;
    size_ = values.size();
    if (dtype == DType::f32) {
      write(fp32_out(values.data()));
      std::swap(f32_, values);
      return f32_.data();
    }
    Buffer16& copy = copy_to(for_fp8);
    write(copy_only ? avtrain::copy_only(values.data(), dtype, copy.data()) : rounded(values.data(), dtype, copy.data()));
    return values.data();
  }
  // An FP8 linear's forward: the storage of its E4M3 codes of this tensor, and then their type and
  // scale (the value the codes were made with), which this tensor is from then on.
  Mask& fp8_codes() { return codes_; }
  void kept_fp8(DType type, float scale) {
    scale_.upload(&scale, 1);
    dtype_ = type;
    for_fp8_ = nullptr;
  }
  // The values in fp32: this tensor's own storage, or unpacked into `scratch`.
  const float* load(Backend& be, Buffer& scratch) const {
    if (dtype_ == DType::f32) return f32_.data();
    scratch.resize(size_);
    be.unpack(operand(), scratch.data(), size_);
    return scratch.data();
  }
  // As a matrix operand, in its stored type (the 16-bit copy in `for_fp8` until the codes are kept).
  Operand operand() const {
    if (dtype_ == DType::f32) return fp32(f32_.data());
    if (is_fp8(dtype_)) return {codes_.data(), dtype_, scale_.data()};
    return {for_fp8_ ? for_fp8_->data() : packed_.data(), dtype_};
  }
  DType dtype() const { return dtype_; }
  std::size_t size() const { return size_; }
  // What this tensor keeps (a copy in `for_fp8` is the workspace's): fp8 codes and their scale.
  std::size_t bytes() const {
    if (for_fp8_) return 0;
    return size_ * dtype_size(dtype_) + (is_fp8(dtype_) ? sizeof(float) : 0);
  }

 private:
  const float* take(Backend& be, Buffer& values, DType dtype, bool round, Buffer16* for_fp8 = nullptr) {
    dtype_ = dtype;
    size_ = values.size();
    if (dtype == DType::f32) {
      std::swap(f32_, values);
      return f32_.data();
    }
    Buffer16& copy = copy_to(for_fp8);
    if (round) be.round_to(rounded(values.data(), dtype, copy.data()), size_);
    else be.pack(values.data(), {copy.data(), dtype}, size_);
    return values.data();
  }
  Buffer16& copy_to(Buffer16* for_fp8) {
    for_fp8_ = for_fp8;
    Buffer16& copy = for_fp8 ? *for_fp8 : packed_;
    copy.resize(size_);
    return copy;
  }

  DType dtype_ = DType::f32;
  std::size_t size_ = 0;
  Buffer f32_;
  Buffer16 packed_;
  Buffer16* for_fp8_ = nullptr;  // where the 16-bit copy is until an FP8 linear keeps its codes
  Mask codes_;                   // an FP8 linear's E4M3 copy
  Buffer scale_;                 // its scale, 1 float
};

}  // namespace avtrain
