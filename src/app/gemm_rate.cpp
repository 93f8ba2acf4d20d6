#include "app/gemm_rate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/buffer.hpp"
#include "core/half.hpp"

namespace avtrain {

double gemm_rate_gflops(Backend& be, DType type, int n, int repeats) {
  const std::size_t count = std::size_t(n) * n, element = dtype_size(type);
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = float(int(i % 7) - 3) * 0.125f;
  std::vector<std::uint16_t> packed(count);
  if (type == DType::f16) floats_to_half(values.data(), packed.data(), count);
  if (type == DType::bf16) floats_to_bf16(values.data(), packed.data(), count);
  const void* host = type == DType::f32 ? static_cast<const void*>(values.data()) : packed.data();
  TensorMemoryScope in_the_backend(be);
  AlignedArray<std::uint8_t> a, b;
  a.upload(static_cast<const std::uint8_t*>(host), count * element);
  b.upload(static_cast<const std::uint8_t*>(host), count * element);
  Buffer c(count);
  auto product = [&] {
    be.gemm(type, Trans::no, Trans::no, n, n, n, 1.0f, {a.data(), type}, n, {b.data(), type}, n, 0.0f, c.data(), n);
    be.synchronize();
  };
  product();  // warm-up: handles, kernels, clocks
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    product();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * double(n) * n / best / 1e9;
}

}  // namespace avtrain
