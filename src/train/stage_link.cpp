#include "train/stage_link.hpp"

#include "core/error.hpp"

namespace avtrain {

namespace {
enum Tag { kHeader = 101, kMask = 102, kTokens = 103, kGradient = 104, kKeys = 105, kCounts = 106 };
enum HeaderField { kB, kL, kAudioTokens, kType, kKeyTokens, kHeaderFields };
}  // namespace

StageLink::StageLink(parallel::Communicator& activations, parallel::Communicator& gradients, Backend& be, int width)
    : act_(activations), grad_(gradients), be_(be), D_(width) {}

StageLink::Outbox& StageLink::free_outbox() {
  for (Outbox& o : outboxes_)
    if (o.done()) return o;
  return outboxes_.emplace_back();
}

void StageLink::send_activation(const Flow& flow) {
  Outbox& o = free_outbox();
  const std::int32_t keys = flow.context ? std::int32_t(flow.key_mask.size() / std::size_t(flow.B)) : 0;
  const std::int32_t header[kHeaderFields] = {flow.B, flow.L, flow.audio_tokens, std::int32_t(flow.x_dtype), keys};
  o.header.upload(header, kHeaderFields);
  const std::size_t mask = flow.token_mask.size(), n = flow.x.size();
  require(mask == std::size_t(flow.B) * flow.L && n == mask * std::size_t(D_),
          "internal: stage " + std::to_string(act_.rank()) + " sends an activation of the wrong size");
  o.mask.resize(mask);
  be_.copy(o.mask.data(), flow.token_mask.data(), mask);
  const void* tokens = nullptr;
  std::size_t bytes = 0;
  if (flow.x_dtype == DType::f32) {
    o.tokens.resize(n);
    be_.copy(o.tokens.data(), flow.x.data(), flow.x.bytes());
    tokens = o.tokens.data(), bytes = o.tokens.bytes();
  } else {
    o.packed.resize(n);
    be_.pack(flow.x.data(), {o.packed.data(), flow.x_dtype}, n);
    tokens = o.packed.data(), bytes = o.packed.bytes();
  }
  const int next = act_.rank() + 1;
  o.requests.push_back(act_.send_async(o.header.data(), o.header.bytes(), next, kHeader));
  act_.group_begin();
  o.requests.push_back(act_.send_async(o.mask.data(), mask, next, kMask));
  if (keys) {  // parallel.cp: what attention and the head of the next stage read besides the tokens
    o.keys.resize(flow.key_mask.size());
    be_.copy(o.keys.data(), flow.key_mask.data(), o.keys.size());
    o.counts.resize(flow.pool_counts.size());
    be_.copy(o.counts.data(), flow.pool_counts.data(), flow.pool_counts.bytes());
    o.requests.push_back(act_.send_async(o.keys.data(), o.keys.size(), next, kKeys));
    o.requests.push_back(act_.send_async(o.counts.data(), o.counts.bytes(), next, kCounts));
  }
  o.requests.push_back(act_.send_async(tokens, bytes, next, kTokens));
  act_.group_end();
}

void StageLink::recv_activation(Flow& flow) {
  const int prev = act_.rank() - 1;
  header_in_.resize(kHeaderFields);
  act_.recv(header_in_.data(), header_in_.bytes(), prev, kHeader);
  std::int32_t h[kHeaderFields];
  header_in_.download(h);
  require(h[kB] > 0 && h[kL] > 0 && h[kType] >= 0 && h[kType] <= int(DType::bf16) && h[kKeyTokens] >= 0 &&
              (h[kKeyTokens] > 0) == (flow.context != nullptr),
          "stage " + std::to_string(act_.rank()) + ": malformed activation header from stage " + std::to_string(prev));
  flow.B = h[kB];
  flow.L = h[kL];
  flow.audio_tokens = h[kAudioTokens];
  flow.x_dtype = DType(h[kType]);
  const std::size_t mask = std::size_t(flow.B) * flow.L, n = mask * std::size_t(D_);
  flow.token_mask.resize(mask);
  flow.x.resize(n);
  const bool f32 = flow.x_dtype == DType::f32;
  if (!f32) packed_in_.resize(n);
  act_.group_begin();
  parallel::Request got_mask = act_.recv_async(flow.token_mask.data(), mask, prev, kMask);
  parallel::Request got_keys, got_counts;
  if (h[kKeyTokens] > 0) {
    flow.key_mask.resize(std::size_t(flow.B) * h[kKeyTokens]);
    flow.pool_counts.resize(std::size_t(2) * flow.B);
    got_keys = act_.recv_async(flow.key_mask.data(), flow.key_mask.size(), prev, kKeys);
    got_counts = act_.recv_async(flow.pool_counts.data(), flow.pool_counts.bytes(), prev, kCounts);
  }
  parallel::Request got_tokens = f32 ? act_.recv_async(flow.x.data(), flow.x.bytes(), prev, kTokens)
                                     : act_.recv_async(packed_in_.data(), packed_in_.bytes(), prev, kTokens);
  act_.group_end();
  got_mask.wait();
  got_keys.wait();
  got_counts.wait();
  got_tokens.wait();
  if (!f32) be_.unpack({packed_in_.data(), flow.x_dtype}, flow.x.data(), n);
}

void StageLink::send_gradient(const Flow& flow) {
  // The receiver sizes its buffer from the forward: a mismatch would hang a tagless transfer.
  require(flow.dx.size() == std::size_t(flow.B) * flow.L * std::size_t(D_),
          "internal: stage " + std::to_string(grad_.rank()) + " sends a gradient of the wrong size");
  Outbox& o = free_outbox();
  o.tokens.resize(flow.dx.size());
  be_.copy(o.tokens.data(), flow.dx.data(), flow.dx.bytes());
  o.requests.push_back(grad_.send_async(o.tokens.data(), o.tokens.bytes(), grad_.rank() - 1, kGradient));
}

void StageLink::recv_gradient(Flow& flow) {
  flow.dx.resize(std::size_t(flow.B) * flow.L * D_);
  grad_.recv(flow.dx.data(), flow.dx.bytes(), grad_.rank() + 1, kGradient);
}

bool StageLink::sends_in_flight() const {
  for (const Outbox& o : outboxes_)
    if (!o.requests.empty()) return true;
  return false;
}

void StageLink::finish_sends() {
  for (Outbox& o : outboxes_) {
    for (parallel::Request& r : o.requests) r.wait();
    o.requests.clear();
  }
}

}  // namespace avtrain
