#pragma once
// The storage types of tensors: fp32, and the two 16-bit compute types of mixed precision.
#include <cstddef>
#include <string>

#include "core/enum_names.hpp"

namespace avtrain {

enum class DType : unsigned char { f32, f16, bf16 };
// The words of parallel.grad_comm_dtype and the traces (precision.mode's add fp8: PrecisionMode).
constexpr EnumNames<DType, 3> enum_names(DType) {
  return {{{DType::f32, "fp32"}, {DType::f16, "fp16"}, {DType::bf16, "bf16"}}};
}

// Bytes an element takes in storage.
inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
  }
  return 4;
}
inline const char* dtype_name(DType t) { return enum_name(t); }

}  // namespace avtrain
