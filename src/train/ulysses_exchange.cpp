#include "train/ulysses_exchange.hpp"

namespace avtrain {

void UlyssesExchange::move(const void* in, void* out, Blocks before, Blocks after) {
  const auto start = Clock::now();
  const std::size_t bytes = std::size_t(before.n0) * before.n1 * before.block;
  send_.resize((bytes + sizeof(float) - 1) / sizeof(float));
  recv_.resize(send_.size());
  be_.transpose_blocks(in, send_.data(), before.n0, before.n1, before.block);  // member-major
  be_.synchronize();
  const std::uint64_t sent = comm_.bytes_sent();
  comm_.all_to_all(send_.data(), recv_.data(), bytes / std::size_t(parts()));
  bytes_ += comm_.bytes_sent() - sent;
  be_.transpose_blocks(recv_.data(), out, after.n0, after.n1, after.block);
  be_.synchronize();
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

void UlyssesExchange::to_heads(const void* local, void* gathered, int B, int Lp, int groups, std::size_t head_bytes) {
  const int P = parts(), rows = B * Lp * groups;
  // [rows, P, E] -> [P, rows, E]; all-to-all; [P, B, Lp groups E] -> [B, P, Lp groups E]
  move(local, gathered, {rows, P, head_bytes}, {P, B, std::size_t(Lp) * groups * head_bytes});
}

void UlyssesExchange::to_tokens(const void* gathered, void* local, int B, int Lp, int groups, std::size_t head_bytes) {
  const int P = parts(), rows = B * Lp * groups;
  // [B, P, Lp groups E] -> [P, B, Lp groups E]; all-to-all; [P, rows, E] -> [rows, P, E]
  move(gathered, local, {B, P, std::size_t(Lp) * groups * head_bytes}, {P, rows, head_bytes});
}

void UlyssesExchange::sum(float* x, std::size_t n) {
  const auto start = Clock::now();
  const std::uint64_t before = comm_.bytes_sent();
  be_.synchronize();
  comm_.all_reduce(x, n, DType::f32, parallel::ReduceOp::sum);
  bytes_ += comm_.bytes_sent() - before;
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace avtrain
