#pragma once
// The transfers between neighbouring pipeline stages of one replica, from tensor memory to tensor
// memory (host memory on the CPU, device memory on a GPU: nothing passes through the host but a
// 16-byte header).
//
// Forward: a header (B, L, audio tokens, the tokens' type) alone, then the key-padding mask and the
// tokens in their type, as one group (16-bit tokens travel as 16 bits: they are exact in it).
// Backward: the tokens' gradient in fp32, its shape known from the forward.
//
// Activations and gradients may go over one communicator (MPI: tags keep the messages apart) or
// over one each (NCCL, which has no tags: each direction is then a FIFO in schedule order, and
// neither direction's sends can hold up the other's receives, so a schedule whose dependencies are
// acyclic cannot deadlock). Every send copies what it sends into buffers of its own (a device copy
// on a GPU), so the caller may overwrite the flow at once. Sends are non-blocking, receives
// blocking.
#include <cstdint>
#include <deque>
#include <vector>

#include "backend/backend.hpp"
#include "model/layer.hpp"
#include "parallel/communicator.hpp"

namespace avtrain {

class StageLink {
 public:
  // activations: the replica's pipeline group (rank = stage), carrying tokens to stage + 1;
  // gradients: the same ranks, carrying gradients to stage - 1 (may be the same communicator).
  // width: the token width D.
  StageLink(parallel::Communicator& activations, parallel::Communicator& gradients, Backend& be, int width);
  StageLink(parallel::Communicator& pipeline, Backend& be, int width) : StageLink(pipeline, pipeline, be, width) {}
  void send_activation(const Flow& flow);  // to stage + 1
  void recv_activation(Flow& flow);        // from stage - 1: fills B, L, audio_tokens, token_mask, x, x_dtype
  void send_gradient(const Flow& flow);    // flow.dx to stage - 1
  void recv_gradient(Flow& flow);          // flow.dx from stage + 1, shaped like flow.x
  // Completes the sends in flight.
  void finish_sends();
  bool sends_in_flight() const;  // a send not yet completed by finish_sends

 private:
  // What one send owns until it completes; reused once it has.
  struct Outbox {
    Labels header;  // B, L, audio tokens, type, keys (parallel.cp: the gathered sequence's length; else 0)
    Mask mask;
    Mask keys;      // parallel.cp: the key mask and the pools' counts (Flow)
    Buffer counts;
    Buffer tokens;  // fp32 tokens or gradient
    Buffer16 packed;  // 16-bit tokens
    std::vector<parallel::Request> requests;
    bool done() {
      for (parallel::Request& r : requests)
        if (!r.test()) return false;
      requests.clear();
      return true;
    }
  };
  Outbox& free_outbox();

  parallel::Communicator& act_;
  parallel::Communicator& grad_;
  Backend& be_;
  int D_;
  std::deque<Outbox> outboxes_;
  Labels header_in_;
  Buffer16 packed_in_;
};

}  // namespace avtrain
