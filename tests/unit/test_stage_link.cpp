// StageLink between two pipeline stages joined by an in-memory mailbox: activations forward in
// their own type, gradients back in fp32, every value arriving bit for bit; over one tagged
// communicator (as MPI) or over one tagless FIFO communicator per direction (as NCCL).
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "train/stage_link.hpp"

namespace avtrain {
namespace {

using parallel::Communicator;
using parallel::ReduceOp;
using parallel::Request;

struct Message {
  int source, tag;
  std::vector<std::uint8_t> bytes;
};

// The two stages' inboxes.
struct Mailbox {
  std::deque<Message> inbox[2];
};

// One member of a two-stage pipeline group. A send goes into the peer's inbox: at once, or (with
// deliver_on_completion) only when its request completes, reading the caller's buffer then, as a
// real non-blocking send may. Requests of deferred sends complete only in wait(). A tagless pipe
// (as NCCL) matches a receive with the peer's oldest message, whatever its tag.
class FakePipe final : public Communicator {
 public:
  FakePipe(Mailbox& mailbox, int rank, bool deliver_on_completion = false, bool tagless = false)
      : mailbox_(mailbox), rank_(rank), deferred_(deliver_on_completion), tagless_(tagless) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }

  void send(const void* data, std::size_t bytes, int peer, int tag) override { deliver(data, bytes, peer, tag); }
  Request send_async(const void* data, std::size_t bytes, int peer, int tag) override {
    if (!deferred_) {
      deliver(data, bytes, peer, tag);
      return Request();
    }
    ++in_flight;
    return Request(std::make_unique<DeferredSend>(*this, data, bytes, peer, tag));
  }
  void recv(void* data, std::size_t bytes, int peer, int tag) override {
    auto& inbox = mailbox_.inbox[rank_];
    for (auto it = inbox.begin(); it != inbox.end(); ++it) {
      if (it->source != peer || (!tagless_ && it->tag != tag)) continue;
      if (it->bytes.size() != bytes) {
        ADD_FAILURE() << "rank " << rank_ << " receives " << bytes << " bytes, tag " << tag << ", but " << it->bytes.size()
                      << " were sent";
      } else {
        std::memcpy(data, it->bytes.data(), bytes);
      }
      inbox.erase(it);
      return;
    }
    ADD_FAILURE() << "rank " << rank_ << " receives tag " << tag << " from " << peer << ": nothing was sent";
  }
  Request recv_async(void* data, std::size_t bytes, int peer, int tag) override {
    recv(data, bytes, peer, tag);
    return Request();
  }
  std::uint64_t bytes_sent() const override { return bytes_; }

  void all_reduce(void*, std::size_t, DType, ReduceOp) override { unexpected("all_reduce"); }
  Request all_reduce_async(void*, std::size_t, DType, ReduceOp) override { return unexpected("all_reduce_async"), Request(); }
  void all_reduce(double*, std::size_t, ReduceOp) override { unexpected("all_reduce(double)"); }
  void all_to_all(const void*, void*, std::size_t) override { unexpected("all_to_all"); }
  void broadcast(void*, std::size_t, int) override { unexpected("broadcast"); }
  Request reduce_scatter_async(void*, const std::vector<std::size_t>&, DType) override {
    return unexpected("reduce_scatter_async"), Request();
  }
  Request all_gather_async(void*, const std::vector<std::size_t>&, DType) override {
    return unexpected("all_gather_async"), Request();
  }
  void gather(const void*, void*, const std::vector<std::size_t>&, DType, int) override { unexpected("gather"); }
  std::vector<std::string> gather(const std::string&, int) override { return unexpected("gather"), std::vector<std::string>(); }
  void barrier() override { unexpected("barrier"); }

  int in_flight = 0;  // deferred sends not yet complete

 private:
  static void unexpected(const char* what) { ADD_FAILURE() << "StageLink called " << what; }

  void deliver(const void* data, std::size_t bytes, int peer, int tag) {
    EXPECT_EQ(peer, 1 - rank_) << "rank " << rank_ << " sends to " << peer;
    if (peer != 1 - rank_) return;
    const auto* p = static_cast<const std::uint8_t*>(data);
    mailbox_.inbox[peer].push_back({rank_, tag, std::vector<std::uint8_t>(p, p + bytes)});
    bytes_ += bytes;
  }

  class DeferredSend final : public Request::Impl {
   public:
    DeferredSend(FakePipe& pipe, const void* data, std::size_t bytes, int peer, int tag)
        : pipe_(pipe), data_(data), bytes_(bytes), peer_(peer), tag_(tag) {}
    bool test() override { return false; }
    void wait() override {
      pipe_.deliver(data_, bytes_, peer_, tag_);
      --pipe_.in_flight;
    }

   private:
    FakePipe& pipe_;
    const void* data_;
    std::size_t bytes_;
    int peer_, tag_;
  };

  Mailbox& mailbox_;
  int rank_;
  bool deferred_, tagless_;
  std::uint64_t bytes_ = 0;
};

constexpr int B = 3, L = 5, D = 4, kAudioTokens = 2;
constexpr std::size_t kTokens = std::size_t(B) * L, kValues = kTokens * D;

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.1f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = (rng() & 1 ? -1.0f : 1.0f) * u(rng);
  return v;
}

// An activation of stage 0: the last samples padded, x in `dtype` (already exact in it).
Flow activation(Backend& be, DType dtype, unsigned seed) {
  Flow f;
  f.B = B;
  f.L = L;
  f.audio_tokens = kAudioTokens;
  f.x_dtype = dtype;
  std::vector<std::uint8_t> mask(kTokens, 1);
  mask[1 * L + 4] = 0;
  mask[2 * L + 3] = 0;
  mask[2 * L + 4] = 0;
  f.token_mask.upload(mask.data(), mask.size());
  const std::vector<float> x = random_values(kValues, seed);
  f.x.resize(kValues);
  std::copy(x.begin(), x.end(), f.x.data());
  if (dtype != DType::f32) be.round_to(rounded(f.x.data(), dtype), kValues);
  return f;
}

template <typename T>
bool same_bits(const AlignedArray<T>& a, const AlignedArray<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

class StageLinkTypes : public ::testing::TestWithParam<DType> {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
  Mailbox mailbox;
  FakePipe pipe0{mailbox, 0}, pipe1{mailbox, 1};
  StageLink stage0{pipe0, *be, D}, stage1{pipe1, *be, D};
};

TEST_P(StageLinkTypes, ActivationArrivesBitForBit) {
  const DType dtype = GetParam();
  const Flow sent = activation(*be, dtype, 7);
  stage0.send_activation(sent);
  stage0.finish_sends();

  Flow received;
  stage1.recv_activation(received);
  EXPECT_EQ(received.B, B);
  EXPECT_EQ(received.L, L);
  EXPECT_EQ(received.audio_tokens, kAudioTokens);
  EXPECT_EQ(received.x_dtype, dtype);
  EXPECT_TRUE(same_bits(received.token_mask, sent.token_mask));
  EXPECT_TRUE(same_bits(received.x, sent.x));
  EXPECT_TRUE(mailbox.inbox[1].empty()) << "messages left over";
}

INSTANTIATE_TEST_SUITE_P(AllTypes, StageLinkTypes, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

// Bytes StageLink hands the pipeline communicator for one activation of `dtype`.
std::uint64_t activation_bytes(DType dtype) {
  const auto be = make_cpu_backend();
  Mailbox mailbox;
  FakePipe pipe0(mailbox, 0);
  StageLink link(pipe0, *be, D);
  link.send_activation(activation(*be, dtype, 3));
  link.finish_sends();
  return pipe0.bytes_sent();
}

TEST(StageLink, SixteenBitTokensTakeHalfTheBytesOfFp32) {
  const std::uint64_t f32 = activation_bytes(DType::f32);
  const std::uint64_t header = f32 - kTokens - 4 * kValues;  // what is neither mask nor tokens
  EXPECT_GT(header, 0u);
  EXPECT_LT(header, 64u);
  EXPECT_EQ(activation_bytes(DType::f16), header + kTokens + 2 * kValues);
  EXPECT_EQ(activation_bytes(DType::bf16), header + kTokens + 2 * kValues);
}

TEST(StageLink, SixteenBitTokensTravelAsTheirBitPatterns) {
  // Two values that differ in fp16 but are equal in bf16: the type on the wire decides what arrives.
  const auto be = make_cpu_backend();
  Mailbox mailbox;
  FakePipe pipe0(mailbox, 0), pipe1(mailbox, 1);
  StageLink stage0(pipe0, *be, D), stage1(pipe1, *be, D);
  Flow sent = activation(*be, DType::f16, 5);
  sent.x[0] = 1.0f + 0x1p-10f;  // exact in fp16, not in bf16
  stage0.send_activation(sent);
  Flow received;
  stage1.recv_activation(received);
  EXPECT_EQ(received.x[0], 1.0f + 0x1p-10f);
  EXPECT_TRUE(same_bits(received.x, sent.x));
}

TEST(StageLink, GradientArrivesBitForBitShapedByTheForward) {
  const auto be = make_cpu_backend();
  Mailbox mailbox;
  FakePipe pipe0(mailbox, 0), pipe1(mailbox, 1);
  StageLink stage0(pipe0, *be, D), stage1(pipe1, *be, D);
  Flow at1;
  at1.B = B;
  at1.L = L;
  const std::vector<float> dx = random_values(kValues, 9);
  at1.dx.resize(kValues);
  std::copy(dx.begin(), dx.end(), at1.dx.data());
  stage1.send_gradient(at1);
  stage1.finish_sends();

  Flow at0 = activation(*be, DType::bf16, 11);  // stage 0 keeps its forward flow: B, L known
  stage0.recv_gradient(at0);
  EXPECT_TRUE(same_bits(at0.dx, at1.dx));
  EXPECT_EQ(pipe1.bytes_sent(), kValues * sizeof(float));
}

TEST(StageLink, FinishSendsCompletesEveryTransferInFlight) {
  // Sends complete only when waited on, and only then read their buffers.
  const auto be = make_cpu_backend();
  Mailbox mailbox;
  FakePipe pipe0(mailbox, 0, true), pipe1(mailbox, 1, true);
  StageLink stage0(pipe0, *be, D), stage1(pipe1, *be, D);
  const Flow first = activation(*be, DType::f32, 1), second = activation(*be, DType::bf16, 2);
  stage0.send_activation(first);
  stage0.send_activation(second);
  EXPECT_EQ(pipe0.in_flight, 6);  // header, mask and tokens, twice
  EXPECT_TRUE(mailbox.inbox[1].empty());
  stage0.finish_sends();
  EXPECT_EQ(pipe0.in_flight, 0);
  EXPECT_EQ(mailbox.inbox[1].size(), 6u);

  Flow a, b;
  stage1.recv_activation(a);
  stage1.recv_activation(b);
  EXPECT_TRUE(same_bits(a.x, first.x));
  EXPECT_EQ(b.x_dtype, DType::bf16);
  EXPECT_TRUE(same_bits(b.x, second.x));
  EXPECT_TRUE(same_bits(b.token_mask, second.token_mask));

  a.dx.resize(kValues);
  std::copy(first.x.data(), first.x.data() + kValues, a.dx.data());
  stage1.send_gradient(a);
  EXPECT_EQ(pipe1.in_flight, 1);
  EXPECT_TRUE(mailbox.inbox[0].empty());
  stage1.finish_sends();
  EXPECT_EQ(pipe1.in_flight, 0);
  Flow back = activation(*be, DType::f32, 1);
  stage0.recv_gradient(back);
  EXPECT_TRUE(same_bits(back.dx, first.x));
}

TEST_P(StageLinkTypes, SendsOwnTheirBytes) {
  // The sender overwrites its flow before the sends move a byte (they read their buffers only when
  // completed): what arrives is what was sent, activation and gradient alike.
  const DType dtype = GetParam();
  FakePipe deferred0(mailbox, 0, true), deferred1(mailbox, 1, true);
  StageLink sender0(deferred0, *be, D), sender1(deferred1, *be, D);
  Flow flow = activation(*be, dtype, 4);
  const Flow original = activation(*be, dtype, 4);
  sender0.send_activation(flow);
  std::fill(flow.x.data(), flow.x.data() + kValues, 0.0f);
  std::fill(flow.token_mask.data(), flow.token_mask.data() + kTokens, std::uint8_t(0));
  sender0.finish_sends();
  Flow received;
  stage1.recv_activation(received);
  EXPECT_TRUE(same_bits(received.x, original.x));
  EXPECT_TRUE(same_bits(received.token_mask, original.token_mask));

  received.dx.upload(original.x.data(), kValues);
  sender1.send_gradient(received);
  std::fill(received.dx.data(), received.dx.data() + kValues, 0.0f);
  sender1.finish_sends();
  stage0.recv_gradient(flow);
  EXPECT_TRUE(same_bits(flow.dx, original.x));
}

TEST(StageLink, TaglessCommunicatorOnePerDirection) {
  // As over NCCL: no tags, a FIFO per direction. Two micro-batches in 1F1B order, both directions
  // in flight at once; every message is matched by its order alone and arrives bit for bit.
  const auto be = make_cpu_backend();
  Mailbox forward, backward;
  FakePipe act0(forward, 0, true, true), act1(forward, 1, true, true);
  FakePipe grad0(backward, 0, true, true), grad1(backward, 1, true, true);
  StageLink stage0(act0, grad0, *be, D), stage1(act1, grad1, *be, D);
  Flow sent[2] = {activation(*be, DType::f16, 21), activation(*be, DType::f32, 22)};
  stage0.send_activation(sent[0]);
  stage0.send_activation(sent[1]);
  stage0.finish_sends();
  Flow at1[2];
  for (int m = 0; m < 2; ++m) {
    stage1.recv_activation(at1[m]);
    EXPECT_EQ(at1[m].x_dtype, sent[m].x_dtype);
    EXPECT_TRUE(same_bits(at1[m].x, sent[m].x)) << "micro-batch " << m;
    EXPECT_TRUE(same_bits(at1[m].token_mask, sent[m].token_mask)) << "micro-batch " << m;
    const std::vector<float> dx = random_values(kValues, 30 + m);
    at1[m].dx.upload(dx.data(), dx.size());
    stage1.send_gradient(at1[m]);
  }
  EXPECT_TRUE(forward.inbox[0].empty() && forward.inbox[1].empty()) << "gradients went over the activations' pipe";
  stage1.finish_sends();
  for (int m = 0; m < 2; ++m) {
    stage0.recv_gradient(sent[m]);
    EXPECT_TRUE(same_bits(sent[m].dx, at1[m].dx)) << "micro-batch " << m;
  }
  EXPECT_EQ(grad0.bytes_sent(), 0u);
  EXPECT_EQ(act1.bytes_sent(), 0u);
}

}  // namespace
}  // namespace avtrain
