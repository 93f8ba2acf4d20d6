#pragma once
// The storage types of tensors: fp32, and the two 16-bit compute types of mixed precision.
#include <cstddef>
#include <string>

namespace avtrain {

enum class DType : unsigned char { f32, f16, bf16 };

inline std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
inline const char* dtype_name(DType t) { return t == DType::f32 ? "fp32" : t == DType::f16 ? "fp16" : "bf16"; }

}  // namespace avtrain
