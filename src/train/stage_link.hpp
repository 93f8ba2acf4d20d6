#pragma once
// The transfers between neighbouring pipeline stages of one replica. Forward: a small header
// (B, L, audio tokens, the tokens' type), then the key-padding mask (the sample lengths) and the
// tokens in their type (they are exact in it, so 16-bit tokens travel as 16 bits). Backward: the
// tokens' gradient in fp32, its shape known from the forward. The bytes travel from host memory
// (tensors in device memory are downloaded first and uploaded on arrival). Sends are non-blocking
// (their buffers are kept until complete), receives blocking, so a schedule whose dependencies are
// acyclic cannot deadlock.
#include <cstdint>
#include <deque>
#include <vector>

#include "backend/backend.hpp"
#include "model/layer.hpp"
#include "parallel/communicator.hpp"

namespace avtrain {

class StageLink {
 public:
  // pipeline: the replica's pipeline group (rank = stage); width: the token width D.
  StageLink(parallel::Communicator& pipeline, Backend& be, int width);
  void send_activation(const Flow& flow);  // to stage + 1
  void recv_activation(Flow& flow);        // from stage - 1: fills B, L, audio_tokens, key_mask, x, x_dtype
  void send_gradient(const Flow& flow);    // flow.dx to stage - 1
  void recv_gradient(Flow& flow);          // flow.dx from stage + 1, shaped like flow.x
  // Completes the sends in flight (their buffers are then freed).
  void finish_sends();

 private:
  struct Pending {
    std::vector<std::uint8_t> bytes;
    parallel::Request request;
  };
  void send(std::vector<std::uint8_t> bytes, int peer, int tag);

  parallel::Communicator& pipe_;
  Backend& be_;
  int D_;
  std::deque<Pending> sends_;
  std::vector<std::uint8_t> recv_buffer_;
  Buffer16 packed_;
};

}  // namespace avtrain
