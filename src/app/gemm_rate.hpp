#pragma once
// The rate of a large square matrix product on a backend, in a type (fp32 accumulation): the peak a
// step's GEMM floor (avtrain-bench) and a model's FLOP utilisation (avtrain-gemm-peak) are read
// against.
#include "backend/backend.hpp"

namespace avtrain {

// Best of `repeats` timed n x n x n products after one untimed one, in GFLOP/s. The operands live in
// the backend's memory and hold small dyadic values, exact in every type.
double gemm_rate_gflops(Backend& be, DType type, int n, int repeats);

}  // namespace avtrain
