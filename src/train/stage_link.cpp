#include "train/stage_link.hpp"

#include <cstring>

#include "core/error.hpp"

namespace avtrain {

namespace {
enum Tag { kHeader = 101, kTokens = 102, kGradient = 103 };
struct Header {
  std::int32_t B, L, audio_tokens, dtype;
};
}  // namespace

StageLink::StageLink(parallel::Communicator& pipeline, Backend& be, int width) : pipe_(pipeline), be_(be), D_(width) {}

void StageLink::send(std::vector<std::uint8_t> bytes, int peer, int tag) {
  // Completed sends are dropped as new ones go out, so the queue holds only those in flight.
  while (!sends_.empty() && sends_.front().request.test()) sends_.pop_front();
  Pending& p = sends_.emplace_back();
  p.bytes = std::move(bytes);
  p.request = pipe_.send_async(p.bytes.data(), p.bytes.size(), peer, tag);
}

void StageLink::send_activation(const Flow& flow) {
  const Header h{flow.B, flow.L, flow.audio_tokens, std::int32_t(flow.x_dtype)};
  std::vector<std::uint8_t> header(sizeof h);
  std::memcpy(header.data(), &h, sizeof h);
  const int next = pipe_.rank() + 1;
  send(std::move(header), next, kHeader);

  const std::size_t mask = flow.key_mask.size(), n = flow.x.size(), elem = dtype_size(flow.x_dtype);
  std::vector<std::uint8_t> body(mask + n * elem);
  std::memcpy(body.data(), flow.key_mask.data(), mask);
  if (flow.x_dtype == DType::f32) {
    flow.x.download(reinterpret_cast<float*>(body.data() + mask));
  } else {
    packed_.resize(n);
    be_.pack(flow.x_dtype, flow.x.data(), packed_.data(), n);
    packed_.download(reinterpret_cast<std::uint16_t*>(body.data() + mask));
  }
  send(std::move(body), next, kTokens);
}

void StageLink::recv_activation(Flow& flow) {
  Header h{};
  const int prev = pipe_.rank() - 1;
  pipe_.recv(&h, sizeof h, prev, kHeader);
  require(h.B > 0 && h.L > 0 && h.dtype >= 0 && h.dtype <= int(DType::bf16),
          "stage " + std::to_string(pipe_.rank()) + ": malformed activation header from stage " + std::to_string(prev));
  flow.B = h.B;
  flow.L = h.L;
  flow.audio_tokens = h.audio_tokens;
  flow.x_dtype = DType(h.dtype);
  const std::size_t mask = std::size_t(h.B) * h.L, n = mask * D_, elem = dtype_size(flow.x_dtype);
  recv_buffer_.resize(mask + n * elem);
  pipe_.recv(recv_buffer_.data(), recv_buffer_.size(), prev, kTokens);
  flow.key_mask.assign(recv_buffer_.begin(), recv_buffer_.begin() + std::ptrdiff_t(mask));
  flow.upload_key_mask();
  if (flow.x_dtype == DType::f32) {
    flow.x.upload(reinterpret_cast<const float*>(recv_buffer_.data() + mask), n);
  } else {
    packed_.upload(reinterpret_cast<const std::uint16_t*>(recv_buffer_.data() + mask), n);
    flow.x.resize(n);
    be_.unpack(flow.x_dtype, packed_.data(), flow.x.data(), n);
  }
}

void StageLink::send_gradient(const Flow& flow) {
  std::vector<std::uint8_t> body(flow.dx.size() * sizeof(float));
  flow.dx.download(reinterpret_cast<float*>(body.data()));
  send(std::move(body), pipe_.rank() - 1, kGradient);
}

void StageLink::recv_gradient(Flow& flow) {
  const std::size_t n = std::size_t(flow.B) * flow.L * D_;
  recv_buffer_.resize(n * sizeof(float));
  pipe_.recv(recv_buffer_.data(), recv_buffer_.size(), pipe_.rank() + 1, kGradient);
  flow.dx.upload(reinterpret_cast<const float*>(recv_buffer_.data()), n);
}

void StageLink::finish_sends() {
  for (Pending& p : sends_) p.request.wait();
  sends_.clear();
}

}  // namespace avtrain
