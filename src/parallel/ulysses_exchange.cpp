#include "parallel/ulysses_exchange.hpp"

namespace avtrain::parallel {

void* UlyssesExchange::staging(Buffer& b, std::size_t bytes) {
  b.resize((bytes + sizeof(float) - 1) / sizeof(float));
  return b.data();
}

void UlyssesExchange::all_to_all(std::size_t bytes_each) {
  const std::uint64_t before = comm_.bytes_sent();
  comm_.all_to_all(send_.data(), recv_.data(), bytes_each);
  bytes_ += comm_.bytes_sent() - before;
}

void UlyssesExchange::to_heads(const void* local, void* gathered, int B, int Lp, int groups, std::size_t head_bytes) {
  const auto start = Clock::now();
  const int P = parts();
  const std::size_t rows = std::size_t(B) * Lp * groups, bytes = rows * P * head_bytes;
  void* send = staging(send_, bytes);
  void* recv = staging(recv_, bytes);
  be_.transpose_blocks(local, send, int(rows), P, head_bytes);  // [rows, P, E] -> [P, rows, E]
  be_.synchronize();
  all_to_all(rows * head_bytes);
  be_.transpose_blocks(recv, gathered, P, B, std::size_t(Lp) * groups * head_bytes);  // [P, B, F] -> [B, P, F]
  be_.synchronize();
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

void UlyssesExchange::to_tokens(const void* gathered, void* local, int B, int Lp, int groups, std::size_t head_bytes) {
  const auto start = Clock::now();
  const int P = parts();
  const std::size_t rows = std::size_t(B) * Lp * groups, bytes = rows * P * head_bytes;
  void* send = staging(send_, bytes);
  void* recv = staging(recv_, bytes);
  be_.transpose_blocks(gathered, send, B, P, std::size_t(Lp) * groups * head_bytes);  // [B, P, F] -> [P, B, F]
  be_.synchronize();
  all_to_all(rows * head_bytes);
  be_.transpose_blocks(recv, local, P, int(rows), head_bytes);  // [P, rows, E] -> [rows, P, E]
  be_.synchronize();
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

void UlyssesExchange::sum(float* x, std::size_t n) {
  const auto start = Clock::now();
  const std::uint64_t before = comm_.bytes_sent();
  be_.synchronize();
  comm_.all_reduce(x, n, DType::f32, ReduceOp::sum);
  bytes_ += comm_.bytes_sent() - before;
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace avtrain::parallel
