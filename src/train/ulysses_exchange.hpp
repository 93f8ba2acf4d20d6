#pragma once
// The ContextExchange of a run at parallel.cp > 1 (DeepSpeed-Ulysses; the trainer's: it joins the
// model's interface to the process groups' communicator): over the context
// communicator (the cp ranks of a replica and stage), each exchange is one all-to-all between two
// transposes on the backend (Backend::transpose_blocks), in the backend's tensor memory:
//   to_heads:  local [B Lp groups, parts, E] -> [parts, B Lp groups, E] -> all-to-all -> [parts, B, Lp groups E]
//              -> gathered [B, parts, Lp groups E]
//   to_tokens: the same steps backwards.
// It counts what it moved and the time it took (the trace's cp_bytes and cp_ms).
#include <chrono>
#include <cstdint>

#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "model/context_exchange.hpp"
#include "parallel/communicator.hpp"

namespace avtrain {

class UlyssesExchange final : public ContextExchange {
 public:
  UlyssesExchange(Backend& be, parallel::Communicator& context) : be_(be), comm_(context) {}
  int parts() const override { return comm_.size(); }
  int part() const override { return comm_.rank(); }
  void to_heads(const void* local, void* gathered, int B, int Lp, int groups, std::size_t head_bytes) override;
  void to_tokens(const void* gathered, void* local, int B, int Lp, int groups, std::size_t head_bytes) override;
  void sum(float* x, std::size_t n) override;

  // Since construction: bytes this rank sent to the other parts (all-to-alls and sums) and the
  // seconds spent in the exchanges (transposes and transfers, the backend synchronized).
  std::uint64_t bytes_sent() const { return bytes_; }
  double seconds() const { return seconds_; }

 private:
  using Clock = std::chrono::steady_clock;
  // x viewed as [n0, n1] blocks of `block` bytes (Backend::transpose_blocks).
  struct Blocks {
    int n0, n1;
    std::size_t block;
  };
  // in -> transposed `before` into the send buffer -> all-to-all -> transposed `after` into out.
  void move(const void* in, void* out, Blocks before, Blocks after);
  Backend& be_;
  parallel::Communicator& comm_;
  Buffer send_, recv_;  // the exchange's two staging buffers
  std::uint64_t bytes_ = 0;
  double seconds_ = 0;
};

}  // namespace avtrain
