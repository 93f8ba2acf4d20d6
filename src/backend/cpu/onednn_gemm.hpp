#pragma once
// bf16 matrix products through oneDNN's matmul primitive (oneDNN 2.x API), fp32 accumulation, for
// CPUs with bf16 matrix units (AVX512-BF16, AMX). Elsewhere the caller widens to fp32 for sgemm.
// Built without oneDNN (no libdnnl-dev, or -DAVTRAIN_ONEDNN=OFF) this still links: disabled.
#include <cstdint>
#include <string>

#include "backend/backend.hpp"

namespace avtrain::cpu {

// Whether bf16 products go through oneDNN: built with oneDNN, and the CPU has AVX512-BF16 or AMX
// (dnnl::get_effective_cpu_isa()), or AVTRAIN_ONEDNN=force in the environment (tests);
// AVTRAIN_ONEDNN=off disables it. Decided once, on the first call of any function here.
//
// Forced on a CPU without bf16 units, oneDNN 2.6 has no bf16 matmul at all (not even a reference
// one: it reports "unimplemented"), so each operand is then unpacked to fp32 (exactly) and the
// product runs through oneDNN's fp32 matmul with the same strides, alpha and beta: what is tested
// there is everything but oneDNN's bf16 kernel. The same fallback covers any shape for which a bf16
// CPU gets no bf16 implementation; onednn_description() counts such shapes.
bool onednn_bf16_enabled();

// A short description for logs/run.json, e.g. "oneDNN 2.6.3 (isa avx2): off, no bf16 units".
std::string onednn_description();

// C[M,N] = alpha * op(A) * op(B) + beta * C; A, B bf16 bit patterns, row-major with leading
// dimensions lda, ldb; C fp32 row-major with ldc; fp32 accumulation. beta == 0 does not read C.
// Runs on the calling thread's oneDNN engine and stream (OpenMP threads inside oneDNN), with
// primitives cached per thread by shape, leading dimensions, alpha and beta.
// Runs whenever built with oneDNN (onednn_bf16_enabled() is the caller's routing decision);
// throws avtrain::Error on bad sizes, on a oneDNN error (with the shape), or when built without.
void onednn_gemm_bf16(Trans ta, Trans tb, int M, int N, int K, float alpha, const std::uint16_t* A, int lda,
                      const std::uint16_t* B, int ldb, float beta, float* C, int ldc);

}  // namespace avtrain::cpu
