// Finite-difference checks of every layer's backward: each parameter tensor and each input
// gradient of AVInput (audio.conv, audio.bn, video.patch, embed), TransformerBlock (ln1, masked
// attention, proj, ln2, fc1, fc2) and AVHead (head.ln, head.cls, cross-entropy, InfoNCE), plus
// Conv1d's input gradient.
#include <gtest/gtest.h>

#include <memory>

#include "backend/backend.hpp"
#include "gradcheck.hpp"
#include "model/av_head.hpp"
#include "model/av_input.hpp"
#include "model/conv1d.hpp"
#include "model/transformer_block.hpp"

namespace avtrain {
namespace {

using testing::check_gradient;

data::SetInfo tiny_set(int channels) {
  data::SetInfo s;
  s.sample_rate = 4000;
  s.fps = 4;
  s.num_classes = 5;
  s.audio_samples = 600;
  s.frames = 4;
  s.height = 8;
  s.width = 8;
  s.channels = channels;
  return s;
}

ModelConfig tiny_model() {
  ModelConfig m;
  m.width = 16;
  m.depth = 2;
  m.heads = 2;
  m.mlp_ratio = 2;
  m.audio_window = 64;
  m.audio_hop = 32;
  m.mel_bins = 8;
  m.tubelet_frames = 2;
  m.patch = 4;
  m.nce_temperature = 0.5f;
  m.nce_weight = 0.7f;
  m.init_std = 0.3f;  // large enough that every term matters
  return m;
}

data::MicroBatch random_batch(const data::SetInfo& s, int B, std::uint64_t seed) {
  KeyedRandom rng(seed, "batch");
  data::MicroBatch mb;
  mb.size = B;
  mb.audio.assign(std::size_t(B) * s.audio_samples, 0.0f);
  mb.video.assign(std::size_t(B) * s.frames * s.height * s.width * s.channels, 0);
  for (int b = 0; b < B; ++b) {
    int alen = int(s.audio_samples / 2 + rng.below(s.audio_samples / 2 + 1));
    int vlen = int(1 + rng.below(s.frames));
    if (b == 0) alen = int(s.audio_samples), vlen = s.frames;
    mb.audio_len.push_back(alen);
    mb.video_len.push_back(vlen);
    mb.label.push_back(int(rng.below(s.num_classes)));
    mb.index.push_back(b);
    for (int i = 0; i < alen; ++i) mb.audio[std::size_t(b) * s.audio_samples + i] = float(0.5 * rng.normal());
    std::size_t frame = std::size_t(s.height) * s.width * s.channels;
    for (std::size_t i = 0; i < vlen * frame; ++i)
      mb.video[std::size_t(b) * s.frames * frame + i] = std::uint8_t(rng.below(256));
  }
  return mb;
}

double dot(const Buffer& a, const Buffer& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

void expect_all_params_pass(ParamStore& params, const std::function<double()>& loss) {
  for (ParamId id = 0; id < ParamId(params.params().size()); ++id) {
    const ParamInfo& info = params.info(id);
    if (!info.trainable) continue;
    auto r = check_gradient(info.name, params.value(id), params.grad(id), info.size, loss);
    EXPECT_LE(r.worst, 1.0) << r.where;
  }
}

class GradCheck : public ::testing::TestWithParam<int> {};

TEST_P(GradCheck, InputLayerParameters) {
  auto be = make_cpu_backend();
  auto s = tiny_set(GetParam());
  auto m = tiny_model();
  ParamStore params;
  Workspace ws;
  AVInput layer(*be, params, ws, PrecisionPolicy(), m, s);
  params.allocate(11);
  auto mb = random_batch(s, 3, 5);
  auto state = layer.make_state();
  Flow flow;
  flow.batch = &mb;
  layer.forward(flow, *state);
  Buffer r;
  fill_random(r, flow.x.size(), 3, "r");
  auto loss = [&] {
    Flow f;
    f.batch = &mb;
    layer.forward(f, *state);
    return dot(f.x, r);
  };
  params.zero_grads();
  layer.forward(flow, *state);
  flow.dx.resize(r.size());
  std::copy(r.data(), r.data() + r.size(), flow.dx.data());
  layer.backward(flow, *state);
  expect_all_params_pass(params, loss);
}

TEST_P(GradCheck, TransformerBlockParametersAndInput) {
  auto be = make_cpu_backend();
  auto m = tiny_model();
  ParamStore params;
  Workspace ws;
  TransformerBlock block(*be, params, ws, PrecisionPolicy(), m, 0);
  params.allocate(12);
  const int B = 2, L = 7, D = m.width;
  Buffer x0, r;
  fill_random(x0, std::size_t(B) * L * D, 4, "x");
  fill_random(r, x0.size(), 5, "r");
  std::vector<std::uint8_t> mask = {1, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1};
  auto state = block.make_state();
  auto run = [&](Flow& f) {
    f.B = B, f.L = L, f.audio_tokens = 3;
    f.token_mask.upload(mask.data(), mask.size());
    f.x.resize(x0.size());
    std::copy(x0.data(), x0.data() + x0.size(), f.x.data());
    block.forward(f, *state);
  };
  auto loss = [&] {
    Flow f;
    run(f);
    return dot(f.x, r);
  };
  params.zero_grads();
  Flow flow;
  run(flow);
  flow.dx.resize(r.size());
  std::copy(r.data(), r.data() + r.size(), flow.dx.data());
  block.backward(flow, *state);
  Buffer dx = std::move(flow.dx);
  expect_all_params_pass(params, loss);
  auto rx = check_gradient("block input", x0.data(), dx.data(), x0.size(), loss, 48);
  EXPECT_LE(rx.worst, 1.0) << rx.where;
}

TEST_P(GradCheck, HeadParametersAndInputWithBothLosses) {
  auto be = make_cpu_backend();
  auto s = tiny_set(GetParam());
  auto m = tiny_model();
  ParamStore params;
  Workspace ws;
  AVHead head(*be, params, ws, PrecisionPolicy(), m, s.num_classes);
  params.allocate(13);
  const int B = 4, L = 6, D = m.width;
  auto mb = random_batch(s, B, 9);
  Buffer x0;
  fill_random(x0, std::size_t(B) * L * D, 6, "x");
  std::vector<std::uint8_t> mask = {1, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1};
  auto state = head.make_state();
  auto run = [&](Flow& f) {
    f.batch = &mb;
    f.B = B, f.L = L, f.audio_tokens = 3;
    f.token_mask.upload(mask.data(), mask.size());
    f.x.resize(x0.size());
    std::copy(x0.data(), x0.data() + x0.size(), f.x.data());
    head.forward(f, *state);
  };
  auto loss = [&] {
    Flow f;
    run(f);
    return f.loss;
  };
  params.zero_grads();
  Flow flow;
  run(flow);
  EXPECT_GT(flow.nce_loss, 0.0);
  head.backward(flow, *state);
  Buffer dx = std::move(flow.dx);
  expect_all_params_pass(params, loss);
  auto rx = check_gradient("head input", x0.data(), dx.data(), x0.size(), loss, 48);
  EXPECT_LE(rx.worst, 1.0) << rx.where;
}

INSTANTIATE_TEST_SUITE_P(Channels, GradCheck, ::testing::Values(1, 3));

TEST(GradCheckConv1d, InputGradient) {
  auto be = make_cpu_backend();
  ParamStore params;
  Conv1d conv(params, "conv", 5, 7, 3, 2, 1, 0.4f, DType::f32);
  params.allocate(3);
  const int B = 2, T = 9, To = conv.output_length(T);
  Buffer x, r, col, y(std::size_t(B) * To * 7), dx(std::size_t(B) * T * 5);
  fill_random(x, std::size_t(B) * T * 5, 1, "x");
  fill_random(r, y.size(), 2, "r");
  auto loss = [&] {
    conv.forward(*be, x.data(), col, y.data(), B, T);
    return dot(y, r);
  };
  loss();
  params.zero_grads();
  conv.backward(*be, fp32(col.data()), r.data(), dx.data(), B, T);
  auto rx = check_gradient("conv input", x.data(), dx.data(), x.size(), loss, 64);
  EXPECT_LE(rx.worst, 1.0) << rx.where;
  expect_all_params_pass(params, loss);
}

// The checker itself must reject a gradient that is off by a few percent.
TEST(GradCheckTightness, RejectsAGradientOffByThreePercent) {
  auto be = make_cpu_backend();
  auto m = tiny_model();
  ParamStore params;
  Workspace ws;
  TransformerBlock block(*be, params, ws, PrecisionPolicy(), m, 0);
  params.allocate(12);
  const int B = 1, L = 5, D = m.width;
  Buffer x0, r;
  fill_random(x0, std::size_t(B) * L * D, 4, "x");
  fill_random(r, x0.size(), 5, "r");
  auto state = block.make_state();
  auto run = [&](Flow& f) {
    f.B = B, f.L = L;
    f.token_mask.resize(L);
    std::fill(f.token_mask.data(), f.token_mask.data() + L, std::uint8_t(1));
    f.x.resize(x0.size());
    std::copy(x0.data(), x0.data() + x0.size(), f.x.data());
    block.forward(f, *state);
  };
  auto loss = [&] {
    Flow f;
    run(f);
    return dot(f.x, r);
  };
  Flow flow;
  run(flow);
  flow.dx.resize(r.size());
  std::copy(r.data(), r.data() + r.size(), flow.dx.data());
  params.zero_grads();
  block.backward(flow, *state);
  ParamId qkv_weight = 0;
  for (ParamId id = 0; id < ParamId(params.params().size()); ++id)
    if (params.info(id).name == "blocks.0.attn.qkv.weight") qkv_weight = id;
  const auto& info = params.info(qkv_weight);
  std::vector<float> wrong(params.grad(qkv_weight), params.grad(qkv_weight) + info.size);
  for (float& g : wrong) g *= 1.03f;
  auto good = check_gradient(info.name, params.value(qkv_weight), params.grad(qkv_weight), info.size, loss, 64);
  auto bad = check_gradient(info.name, params.value(qkv_weight), wrong.data(), info.size, loss, 64);
  EXPECT_LE(good.worst, 1.0) << good.where;
  EXPECT_GT(bad.worst, 1.0) << "a 3% error went unnoticed";
}

}  // namespace
}  // namespace avtrain
