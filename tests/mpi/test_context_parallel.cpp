// parallel.cp at the level of the net: on every rank of the world (the parts of one sample's tokens),
// AVNet forward and backward through a UlyssesExchange give the loss of the whole sequence run on one
// rank, and the parts' parameter gradients add up to its gradients. Samples with padding in both
// segments; attention with p kept, recomputed (train.recompute attention) and the blocks recomputed;
// fp32, bf16 and fp16 (16-bit tensors cross the parts as their 16-bit copies); train and eval.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/keyed_random.hpp"
#include "model/av_net.hpp"
#include "model/token_parts.hpp"
#include "mpi_gtest_runner.hpp"
#include "parallel/mpi_communicator.hpp"
#include "train/ulysses_exchange.hpp"

namespace avtrain {
namespace {

data::SetInfo tiny_set() {
  data::SetInfo s;
  s.sample_rate = 4000;
  s.fps = 4;
  s.num_classes = 5;
  s.audio_samples = 600;
  s.frames = 4;
  s.height = 8;
  s.width = 8;
  s.channels = 3;
  return s;
}

ModelConfig tiny_model() {
  ModelConfig m;
  m.width = 16;
  m.depth = 2;
  m.heads = 4;  // divisible by 2 and 4 parts
  m.mlp_ratio = 2;
  m.audio_window = 64;
  m.audio_hop = 32;
  m.mel_bins = 8;
  m.tubelet_frames = 2;
  m.patch = 4;
  m.nce_temperature = 0.5f;
  m.nce_weight = 0.7f;
  m.init_std = 0.3f;
  return m;
}

// Samples whose audio and video are cut short by different amounts (padding in both segments).
data::MicroBatch padded_batch(const data::SetInfo& s, int B) {
  KeyedRandom rng(7, "batch");
  data::MicroBatch mb;
  mb.size = B;
  mb.audio.assign(std::size_t(B) * s.audio_samples, 0.0f);
  mb.video.assign(std::size_t(B) * s.frames * s.height * s.width * s.channels, 0);
  const std::size_t frame = std::size_t(s.height) * s.width * s.channels;
  for (int b = 0; b < B; ++b) {
    const int alen = b == 0 ? s.audio_samples : int(s.audio_samples / 3 + rng.below(s.audio_samples / 2));
    const int vlen = b == 0 ? s.frames : int(1 + rng.below(s.frames - 1));
    mb.audio_len.push_back(alen);
    mb.video_len.push_back(vlen);
    mb.label.push_back(int(rng.below(s.num_classes)));
    mb.index.push_back(b);
    for (int i = 0; i < alen; ++i) mb.audio[std::size_t(b) * s.audio_samples + i] = float(0.5 * rng.normal());
    for (std::size_t i = 0; i < vlen * frame; ++i) mb.video[std::size_t(b) * s.frames * frame + i] = std::uint8_t(rng.below(256));
  }
  return mb;
}

struct Trained {
  double loss = 0, eval_loss = 0;
  std::vector<float> grads;  // every trainable parameter's, in order
};

Trained train(Backend& be, const PrecisionPolicy& policy, Recompute recompute, ContextExchange* context,
        const data::MicroBatch& mb) {
  const data::SetInfo s = tiny_set();
  ParamStore params;
  AVNet net(be, params, tiny_model(), s, policy, {}, recompute);
  params.allocate(11);
  params.refresh_working(be);
  params.zero_grads();
  auto states = net.make_states();
  Trained r;
  Flow flow;
  flow.batch = &mb;
  flow.context = context;
  net.forward(flow, states);
  r.loss = flow.loss;
  net.backward(flow, states);
  for (ParamId id = 0; id < ParamId(params.params().size()); ++id) {
    const ParamInfo& info = params.info(id);
    if (!info.trainable) continue;
    const float* g = params.grad(id);  // host memory: the CPU backend's
    r.grads.insert(r.grads.end(), g, g + info.size);
  }
  Flow eval;
  eval.batch = &mb;
  eval.mode = Mode::eval;
  eval.context = context;
  net.forward(eval, states);
  r.eval_loss = eval.loss;
  return r;
}

struct Case {
  const char* name;
  PrecisionMode mode;
  Recompute recompute;
  double loss_tol, grad_tol;  // relative to the largest gradient
};

class ContextParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ContextParallel, PartsAddUpToTheWholeSequence) {
  const Case c = GetParam();
  parallel::MpiCommunicator world(MPI_COMM_WORLD, false, "context");
  auto be = make_cpu_backend();
  be->set_threads(1);
  PrecisionConfig pc;
  pc.mode = c.mode;
  const PrecisionPolicy policy(pc);
  const data::MicroBatch mb = padded_batch(tiny_set(), 3);
  const Trained whole = train(*be, policy, c.recompute, nullptr, mb);
  UlyssesExchange exchange(*be, world);
  Trained parts = train(*be, policy, c.recompute, &exchange, mb);
  world.all_reduce(parts.grads.data(), parts.grads.size(), DType::f32, parallel::ReduceOp::sum);
  EXPECT_NEAR(parts.loss, whole.loss, c.loss_tol * std::abs(whole.loss));
  EXPECT_NEAR(parts.eval_loss, whole.eval_loss, c.loss_tol * std::abs(whole.eval_loss));
  ASSERT_EQ(parts.grads.size(), whole.grads.size());
  float largest = 0, worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < whole.grads.size(); ++i) largest = std::max(largest, std::abs(whole.grads[i]));
  for (std::size_t i = 0; i < whole.grads.size(); ++i)
    if (std::abs(parts.grads[i] - whole.grads[i]) > worst) worst = std::abs(parts.grads[i] - whole.grads[i]), at = i;
  EXPECT_LE(worst, c.grad_tol * largest) << "gradient element " << at << ": " << parts.grads[at] << " against "
                                         << whole.grads[at] << " (largest " << largest << ")";
  EXPECT_GT(exchange.bytes_sent(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ContextParallel,
    ::testing::Values(Case{"fp32_kept", PrecisionMode::fp32, Recompute::none, 1e-6, 1e-5},
                      Case{"fp32_attention", PrecisionMode::fp32, Recompute::attention, 1e-6, 1e-5},
                      Case{"fp32_blocks", PrecisionMode::fp32, Recompute::blocks, 1e-6, 1e-5},
                      Case{"bf16_kept", PrecisionMode::bf16, Recompute::none, 1e-2, 5e-2},
                      Case{"bf16_attention", PrecisionMode::bf16, Recompute::attention, 1e-2, 5e-2},
                      Case{"fp16_kept", PrecisionMode::fp16, Recompute::none, 1e-2, 5e-2}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// The cut itself: every valid token in exactly one part, the parts' valid tokens within one of each
// other in each segment, the gathered key mask the parts' masks one after the other.
TEST(TokenParts, EveryValidTokenOnceAndBalanced) {
  TokenGeometry g;
  g.audio_tokens = 9;
  g.video_tokens = 8;
  g.tokens = 17;
  for (int P : {1, 2, 3, 4}) {
    const std::vector<int> va{9, 5, 2}, vv{8, 3, 7};
    std::vector<int> seen(3 * 17, 0);
    std::vector<std::vector<std::uint8_t>> masks;
    for (int r = 0; r < P; ++r) {
      const TokenParts t = TokenParts::of(g, P, r);
      const TokenParts::Cut c = t.cut(va, vv);
      const int Lp = t.tokens();
      for (int b = 0; b < 3; ++b) {
        int audio = 0, video = 0;
        for (int j = 0; j < Lp; ++j) {
          const std::int32_t row = c.rows[std::size_t(b) * Lp + j];
          ASSERT_EQ(row >= 0, c.mask[std::size_t(b) * Lp + j] != 0);
          if (row < 0) continue;
          ++seen[std::size_t(row)];
          const int l = row - b * 17;
          ASSERT_EQ(l < 9, j < t.audio_slots) << "a token outside its segment's slots";
          (l < 9 ? audio : video) += 1;
          EXPECT_EQ(c.keys[(std::size_t(b) * P + r) * Lp + j], 1);
        }
        EXPECT_LE(std::abs(audio - va[std::size_t(b)] / P), 1);
        EXPECT_LE(std::abs(video - vv[std::size_t(b)] / P), 1);
        EXPECT_EQ(c.counts[std::size_t(b)], float(va[std::size_t(b)]));
      }
      masks.push_back(c.keys);
    }
    for (int r = 1; r < P; ++r) EXPECT_EQ(masks[std::size_t(r)], masks[0]) << "every part sees the same keys";
    for (int b = 0; b < 3; ++b)
      for (int l = 0; l < 17; ++l)
        EXPECT_EQ(seen[std::size_t(b) * 17 + l], int(l < 9 ? l < va[std::size_t(b)] : l - 9 < vv[std::size_t(b)]))
            << "P " << P << " sample " << b << " token " << l;
  }
}

}  // namespace
}  // namespace avtrain

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = avtrain::test::run_tests_on_every_rank();
  MPI_Finalize();
  return failed;
}
