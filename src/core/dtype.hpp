#pragma once
// The storage types of tensors: fp32, the two 16-bit compute types of mixed precision, and the two
// 8-bit formats of FP8 products (core/fp8.hpp), stored with a per-tensor scale.
#include <cstddef>
#include <string>

#include "core/enum_names.hpp"

namespace avtrain {

enum class DType : unsigned char { f32, f16, bf16, e4m3, e5m2 };
// The words of parallel.grad_comm_dtype and the traces (precision.mode's add fp8: PrecisionMode). The
// fp8 types are not among them: no option stores a whole tensor in fp8 (dtype_name names them).
constexpr EnumNames<DType, 3> enum_names(DType) {
  return {{{DType::f32, "fp32"}, {DType::f16, "fp16"}, {DType::bf16, "bf16"}}};
}

// Bytes an element takes in storage.
inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::e4m3:
    case DType::e5m2: return 1;
  }
  return 4;
}
// The fp8 types: codes of one byte, whose values are code / scale.
constexpr bool is_fp8(DType t) { return t == DType::e4m3 || t == DType::e5m2; }
inline const char* dtype_name(DType t) {
  if (t == DType::e4m3) return "e4m3";
  if (t == DType::e5m2) return "e5m2";
  return enum_name(t);
}

}  // namespace avtrain
