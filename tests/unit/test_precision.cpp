// The precision policy, the loss scaler, working copies of the weights, and a transformer block
// computed in fp16/bf16 against the same block in fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "gradcheck.hpp"
#include "model/activation_stats.hpp"
#include "model/transformer_block.hpp"
#include "precision/loss_scaler.hpp"
#include "precision/precision_policy.hpp"

namespace avtrain {
namespace {

PrecisionConfig config_with(DType mode, const std::string& fp32_layers = "") {
  PrecisionConfig c;
  c.mode = *parse_enum<PrecisionMode>(dtype_name(mode));
  c.fp32_layers = fp32_layers;
  return c;
}

// ---------------------------------------------------------------- policy

TEST(PrecisionPolicy, GlobsKeepModulesInFp32) {
  PrecisionPolicy p(config_with(DType::bf16, " head.* , blocks.0.attn.*"));
  EXPECT_EQ(p.compute(), DType::bf16);
  EXPECT_EQ(p.of("head.cls"), DType::f32);
  EXPECT_EQ(p.of("blocks.0.attn.qkv"), DType::f32);
  EXPECT_EQ(p.of("blocks.0.mlp.fc1"), DType::bf16);
  EXPECT_EQ(p.of("blocks.10.attn.qkv"), DType::bf16);
  EXPECT_TRUE(p.unused_patterns().empty());
}

TEST(PrecisionPolicy, Fp32ModeIsFp32EverywhereAndUnmatchedPatternsAreReported) {
  PrecisionPolicy fp32(config_with(DType::f32));
  EXPECT_EQ(fp32.of("blocks.0.attn.qkv"), DType::f32);
  PrecisionPolicy p(config_with(DType::f16, "blocks.9.*,embed"));
  EXPECT_EQ(p.of("embed"), DType::f32);
  EXPECT_EQ(p.unused_patterns(), std::vector<std::string>{"blocks.9.*"});
}

// precision.mode's words are DType's, each naming its compute type, and fp8, whose compute type is
// bf16 (the option table refuses any other word, naming the option).
TEST(PrecisionPolicy, ModeWordsAreTheDTypeNamesAndFp8) {
  for (const DType t : {DType::f32, DType::f16, DType::bf16}) {
    EXPECT_EQ(parse_enum<DType>(dtype_name(t)), t);
    EXPECT_EQ(compute_type(parse_enum<PrecisionMode>(dtype_name(t)).value()), t);
  }
  EXPECT_EQ(parse_enum<PrecisionMode>("fp8"), PrecisionMode::fp8);
  EXPECT_EQ(compute_type(PrecisionMode::fp8), DType::bf16);
  EXPECT_EQ(PrecisionPolicy(PrecisionConfig{.mode = PrecisionMode::fp8}).compute(), DType::bf16);
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_FALSE(parse_enum<DType>("fp8").has_value());
  EXPECT_FALSE(parse_enum<PrecisionMode>("FP16").has_value());
  EXPECT_EQ(enum_words<DType>(), "fp32, fp16, bf16");
  EXPECT_EQ(enum_words<PrecisionMode>(), "fp32, fp16, bf16, fp8");
}

// ---------------------------------------------------------------- loss scaler

TEST(LossScaler, AutoIsDynamicForFp16AndNoneOtherwise) {
  PrecisionConfig c;
  EXPECT_EQ(LossScaler(c, DType::f16).kind(), LossScaler::Kind::dynamic);
  EXPECT_EQ(LossScaler(c, DType::f16).scale(), 65536.0);
  EXPECT_EQ(LossScaler(c, DType::bf16).kind(), LossScaler::Kind::none);
  EXPECT_EQ(LossScaler(c, DType::f32).scale(), 1.0);
}

TEST(LossScaler, GradScalerSemantics) {
  PrecisionConfig c;
  c.growth_interval = 3;
  LossScaler s(c, DType::f16);
  EXPECT_FALSE(s.update(true, 0));  // skipped, backed off
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(false, 1));
  EXPECT_TRUE(s.update(false, 2));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(false, 3));  // third clean step in a row: grows
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.update(false, 4));
  EXPECT_FALSE(s.update(true, 5));  // an overflow resets the growth count
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(false, 6));
  EXPECT_TRUE(s.update(false, 7));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.skipped(), 2);
}

TEST(LossScaler, HysteresisBacksOffOnlyAfterThatManyOverflows) {
  PrecisionConfig c;
  c.hysteresis = 2;
  c.growth_interval = 2;
  LossScaler s(c, DType::f16);
  EXPECT_FALSE(s.update(true, 0));
  EXPECT_EQ(s.scale(), 65536.0);  // first overflow: skipped, scale kept
  EXPECT_FALSE(s.update(true, 1));
  EXPECT_EQ(s.scale(), 32768.0);  // second: backs off
  EXPECT_FALSE(s.update(true, 2));
  EXPECT_EQ(s.scale(), 16384.0);  // the tracker stays spent until the scale grows
  EXPECT_TRUE(s.update(false, 3));
  EXPECT_TRUE(s.update(false, 4));
  EXPECT_EQ(s.scale(), 32768.0);  // grown: the hysteresis is restored
  EXPECT_FALSE(s.update(true, 5));
  EXPECT_EQ(s.scale(), 32768.0);
}

TEST(LossScaler, AnOverflowAtTheMinimumStopsTheRun) {
  PrecisionConfig c;
  c.init_scale = 4;
  c.min_scale = 2;
  LossScaler s(c, DType::f16);
  EXPECT_FALSE(s.update(true, 0));
  EXPECT_EQ(s.scale(), 2.0);
  try {
    s.update(true, 7);
    FAIL() << "no error at the minimum scale";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("step 7"), std::string::npos) << m;
    EXPECT_NE(m.find("precision.min_scale"), std::string::npos) << m;
  }
}

TEST(LossScaler, FixedAndNoneSkipButNeverChange) {
  PrecisionConfig c;
  c.loss_scale = *LossScale::parse("256");
  LossScaler fixed(c, DType::f16);
  EXPECT_EQ(fixed.kind(), LossScaler::Kind::fixed);
  EXPECT_FALSE(fixed.update(true, 0));
  EXPECT_EQ(fixed.scale(), 256.0);
  c.loss_scale = *LossScale::parse("none");
  LossScaler none(c, DType::f16);
  EXPECT_FALSE(none.update(true, 0));
  EXPECT_EQ(none.scale(), 1.0);
  EXPECT_EQ(none.skipped(), 1);
  for (const char* bad : {"big", "-4", "0", "12x", "", "1e39", "Dynamic"}) EXPECT_FALSE(LossScale::parse(bad)) << bad;
}

TEST(LossScale, WordsAndNumbersReadBackAsWritten) {
  for (const char* text : {"auto", "dynamic", "none", "256", "2.5e2", "1e30"}) {
    const std::optional<LossScale> s = LossScale::parse(text);
    ASSERT_TRUE(s) << text;
    EXPECT_EQ(s->text(), text);
  }
  EXPECT_EQ(LossScale::parse("dynamic")->kind, LossScale::Kind::dynamic);
  EXPECT_EQ(LossScale::parse("2.5e2")->kind, LossScale::Kind::fixed);
  EXPECT_EQ(LossScale::parse("2.5e2")->fixed, 250.0);
  EXPECT_EQ(LossScale{}.text(), "auto");
}

// ---------------------------------------------------------------- working copies

TEST(ParamStore, WorkingCopiesAreTheRoundedMastersRefreshedOnDemand) {
  auto be = make_cpu_backend();
  ParamStore store;
  const ParamId w = store.add("m", "weight", {3, 5}, Init::normal, 0.7f, true);
  const ParamId b = store.add("m", "bias", {5}, Init::zeros, 0.0f, false);
  store.set_working_dtype(w, DType::bf16);
  store.allocate(3);
  store.refresh_working(*be);
  EXPECT_EQ(store.operand(b).dtype, DType::f32);
  EXPECT_EQ(store.operand(b).data, store.value(b));
  ASSERT_EQ(store.operand(w).dtype, DType::bf16);
  auto bits = [&] { return static_cast<const std::uint16_t*>(store.operand(w).data); };
  for (int i = 0; i < 15; ++i) EXPECT_EQ(bits()[i], float_to_bf16(store.value(w)[i])) << i;
  store.value(w)[4] = 1.0f + 1.0f / 1024;  // not a bf16 value
  store.refresh_working(*be);
  EXPECT_EQ(bits()[4], float_to_bf16(1.0f + 1.0f / 1024));
  EXPECT_EQ(store.working_bytes() % 64, 0u);
}

// ---------------------------------------------------------------- a block in 16 bits

ModelConfig block_model() {
  ModelConfig m;
  m.width = 32;
  m.depth = 2;
  m.heads = 4;
  m.mlp_ratio = 2;
  m.init_std = 0.2f;
  return m;
}

struct BlockRun {
  Buffer y, dx, grads;
  std::size_t state_bytes = 0;
  std::map<std::string, float> act_absmax;
};

// One block forward and backward on fixed inputs in the given policy (on the CPU backend unless given
// another), its activation maxima noted and detect-anomaly's checks on.
BlockRun run_block(const PrecisionPolicy& policy, std::unique_ptr<Backend> be = make_cpu_backend(),
                   Recompute recompute = Recompute::none) {
  ParamStore params;
  Workspace ws;
  TransformerBlock block(*be, params, ws, policy, block_model(), 0, recompute);
  params.allocate(21);
  params.refresh_working(*be);
  const int B = 3, L = 9, D = block_model().width;
  Buffer x0, r;
  fill_random(x0, std::size_t(B) * L * D, 7, "x");
  fill_random(r, x0.size(), 8, "r");
  const DType in = policy.of("blocks.0.ln1");
  be->round_to(rounded(x0.data(), in), x0.size());
  be->round_to(rounded(r.data(), in), r.size());
  Flow flow;
  flow.B = B, flow.L = L, flow.audio_tokens = 4;
  std::vector<std::uint8_t> key_mask(std::size_t(B) * L, 1);
  key_mask[5] = key_mask[L + 8] = 0;
  flow.token_mask.upload(key_mask.data(), key_mask.size());
  flow.x.resize(x0.size());
  std::copy(x0.data(), x0.data() + x0.size(), flow.x.data());
  flow.x_dtype = in;
  ActivationStats stats;
  flow.act_stats = &stats;
  flow.detect_anomaly = true;
  auto state = block.make_state();
  block.forward(flow, *state);
  BlockRun out;
  out.act_absmax = stats.read();
  out.state_bytes = state->bytes();
  out.y = std::move(flow.x);
  flow.dx.resize(r.size());
  std::copy(r.data(), r.data() + r.size(), flow.dx.data());
  block.backward(flow, *state);
  out.dx = std::move(flow.dx);
  out.grads.resize(params.grads().size());
  std::copy(params.grads().data(), params.grads().data() + params.grads().size(), out.grads.data());
  return out;
}

double relative_error(const Buffer& got, const Buffer& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

bool all_exact_in(DType t, const Buffer& x) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float r = t == DType::f16 ? half_to_float(float_to_half(x[i])) : bf16_to_float(float_to_bf16(x[i]));
    if (r != x[i]) return false;
  }
  return true;
}

class BlockInSixteenBits : public ::testing::TestWithParam<DType> {};

TEST_P(BlockInSixteenBits, AgreesWithFp32KeepsHalfTheBytesAndRoundsItsOutputs) {
  const DType t = GetParam();
  const BlockRun ref = run_block(PrecisionPolicy());
  const BlockRun amp = run_block(PrecisionPolicy(config_with(t)));
  const double tol = t == DType::f16 ? 5e-3 : 3e-2;  // ~ a few units in the last place of the type
  EXPECT_LT(relative_error(amp.y, ref.y), tol);
  EXPECT_LT(relative_error(amp.dx, ref.dx), tol);
  EXPECT_LT(relative_error(amp.grads, ref.grads), tol);
  EXPECT_GT(relative_error(amp.y, ref.y), 0.0);  // the 16-bit path really ran
  EXPECT_TRUE(all_exact_in(t, amp.y));
  EXPECT_TRUE(all_exact_in(t, amp.dx));
  EXPECT_LE(double(amp.state_bytes), 0.55 * double(ref.state_bytes));
}

TEST_P(BlockInSixteenBits, AFullyFp32ListedBlockIsTheFp32Block) {
  const DType t = GetParam();
  const BlockRun ref = run_block(PrecisionPolicy());
  const BlockRun listed = run_block(PrecisionPolicy(config_with(t, "blocks.0.*")));
  EXPECT_EQ(relative_error(listed.y, ref.y), 0.0);
  EXPECT_EQ(relative_error(listed.grads, ref.grads), 0.0);
  EXPECT_EQ(listed.state_bytes, ref.state_bytes);
}

// The CPU standing in for a backend that writes copy_only outputs' copies alone (CUDA under
// device.fused): given a copy_only output, an op runs as the CPU's, then poisons the output's fp32
// values (its scratch) with NaN, so a layer that still read them would show it in its outputs,
// gradients or statistics. With fused_attention, it also claims fused attention in 16-bit products
// (the CPU's unfused attention gives the same bits with p kept or recomputed), so the layers ask
// attention_forward / attention_backward for copy_only ctx and dqkv, poisoned the same way.
class SixteenBitOutputsOnly final : public CpuBackend {
 public:
  explicit SixteenBitOutputsOnly(bool fused_attention = false) : fused_attention_(fused_attention) {}
  bool fuses_attention(DType compute, int) const override { return fused_attention_ && compute != DType::f32; }
  void attention_forward(DType compute, Operand qkv, const std::uint8_t* key_mask, float* p, float* row_stats,
                         Output ctx, int B, int L, int H, int hd) override {
    CpuBackend::attention_forward(compute, qkv, key_mask, p, row_stats, ctx, B, L, H, hd);
    if (poison(ctx, std::size_t(B) * L * H * hd)) ++attention_calls;
  }
  void attention_backward(DType compute, Operand qkv, const AttentionProbs& probs, const float* dctx, Output dqkv,
                          int B, int L, int H, int hd) override {
    CpuBackend::attention_backward(compute, qkv, probs, dctx, dqkv, B, L, H, hd);
    if (poison(dqkv, std::size_t(B) * L * 3 * H * hd)) ++attention_calls;
  }
  void linear_forward(DType type, Operand x, Operand w, const float* bias, Output y, int rows, int in,
                      int out) override {
    CpuBackend::linear_forward(type, x, w, bias, y, rows, in, out);
    if (poison(y, std::size_t(rows) * out)) ++calls;
  }
  void linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, Output f, Output g, int rows, int in,
                           int out) override {
    CpuBackend::linear_gelu_forward(type, x, w, bias, f, g, rows, in, out);
    const bool f_poisoned = poison(f, std::size_t(rows) * out), g_poisoned = poison(g, std::size_t(rows) * out);
    if (f_poisoned && g_poisoned) ++calls;
  }
  void layernorm_forward(const float* x, const float* gamma, const float* beta, Output y, float* mean, float* rstd,
                         int rows, int dim, float eps) override {
    CpuBackend::layernorm_forward(x, gamma, beta, y, mean, rstd, rows, dim, eps);
    if (poison(y, std::size_t(rows) * dim)) ++calls;
  }
  int* calls_out = nullptr;
  int* attention_calls_out = nullptr;
  int calls = 0, attention_calls = 0;
  ~SixteenBitOutputsOnly() override {
    if (calls_out) *calls_out = calls;
    if (attention_calls_out) *attention_calls_out = attention_calls;
  }

 private:
  // A copy_only output's values (its scratch) poisoned; whether it was one.
  bool poison(const Output& y, std::size_t n) {
    if (!y.copy_only) return false;
    EXPECT_NE(y.copy.data, nullptr);
    EXPECT_NE(y.dtype(), DType::f32);
    fill(y.values, n, NAN);
    return true;
  }
  bool fused_attention_;
};

// Where the backend writes only the 16-bit copies of LayerNorm's outputs, qkv (bf16: attention's
// products read it), f1 and g (the outputs the block asks for copy_only), the block reads nothing else: the same bits, statistics included.
TEST_P(BlockInSixteenBits, ReadsOnlyTheSixteenBitCopiesWhereTheBackendWritesNothingElse) {
  const DType t = GetParam();
  for (const Recompute recompute : {Recompute::none, Recompute::attention, Recompute::blocks}) {
    SCOPED_TRACE(std::string("recompute ") + enum_name(recompute));
    const BlockRun ref = run_block(PrecisionPolicy(config_with(t)), make_cpu_backend(), recompute);
    int calls = 0;
    auto stand_in = std::make_unique<SixteenBitOutputsOnly>();
    stand_in->calls_out = &calls;
    const BlockRun only16 = run_block(PrecisionPolicy(config_with(t)), std::move(stand_in), recompute);
    // ln1, ln2, fc1 and (bf16) qkv, once in forward and again in backward's recomputation of the block.
    EXPECT_EQ(calls, (t == DType::bf16 ? 4 : 3) * (recompute == Recompute::blocks ? 2 : 1));
    EXPECT_EQ(relative_error(only16.y, ref.y), 0.0);
    EXPECT_EQ(relative_error(only16.dx, ref.dx), 0.0);
    EXPECT_EQ(relative_error(only16.grads, ref.grads), 0.0);
    EXPECT_EQ(only16.act_absmax, ref.act_absmax);
    EXPECT_EQ(ref.act_absmax.size(), 6u) << "ln1, qkv, proj, ln2, fc1, fc2";
  }
}

// Fused attention that writes ctx's and dqkv's 16-bit copies alone (bf16: attention's products are
// in qkv's type; fp16 blocks do not fuse attention): the block reads those copies only, under every
// recompute mode, and gives the bits of the unfused path with its fp32 ctx and dqkv rounded by the layer.
TEST_P(BlockInSixteenBits, FusedAttentionReadsOnlyTheSixteenBitCopiesOfCtxAndDqkv) {
  const DType t = GetParam();
  for (const Recompute recompute : {Recompute::none, Recompute::attention, Recompute::blocks}) {
    SCOPED_TRACE(std::string("recompute ") + enum_name(recompute));
    const BlockRun ref = run_block(PrecisionPolicy(config_with(t)), make_cpu_backend(), recompute);
    int calls = 0, attention_calls = 0;
    auto stand_in = std::make_unique<SixteenBitOutputsOnly>(true);
    stand_in->calls_out = &calls;
    stand_in->attention_calls_out = &attention_calls;
    const BlockRun only16 = run_block(PrecisionPolicy(config_with(t)), std::move(stand_in), recompute);
    // Forward (again in backward under recompute = blocks), then backward.
    EXPECT_EQ(attention_calls, t == DType::bf16 ? (recompute == Recompute::blocks ? 3 : 2) : 0);
    EXPECT_EQ(calls, (t == DType::bf16 ? 4 : 3) * (recompute == Recompute::blocks ? 2 : 1));
    EXPECT_EQ(relative_error(only16.y, ref.y), 0.0);
    EXPECT_EQ(relative_error(only16.dx, ref.dx), 0.0);
    EXPECT_EQ(relative_error(only16.grads, ref.grads), 0.0);
    EXPECT_EQ(only16.act_absmax, ref.act_absmax);
  }
}

// Records what the block's fp32 mlp.fc1 (its only fp32 linear of `in` x `out` here) reads, forward and
// in its weight gradient, and how far its forward output is from a double product of what it read.
struct Fp32Fc1Reads {
  std::vector<std::vector<float>> forward_x, grad_x;
  double worst = 0;  // the largest |f - x W^T - b| / (|x| |W| + |b|) over the outputs
};

class RecordsFp32Fc1 final : public CpuBackend {
 public:
  RecordsFp32Fc1(Fp32Fc1Reads& reads, int in, int out) : reads_(reads), in_(in), out_(out) {}
  void linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, Output f, Output g, int rows, int in,
                           int out) override {
    CpuBackend::linear_gelu_forward(type, x, w, bias, f, g, rows, in, out);
    if (type != DType::f32 || in != in_ || out != out_) return;
    EXPECT_EQ(w.dtype, DType::f32);
    const std::vector<float> xv = values(x, std::size_t(rows) * in);
    const auto* wv = static_cast<const float*>(w.data);
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out; ++o) {
        double dot = bias[o], size = std::fabs(bias[o]);
        for (int k = 0; k < in; ++k) {
          dot += double(xv[std::size_t(r) * in + k]) * wv[std::size_t(o) * in + k];
          size += std::fabs(double(xv[std::size_t(r) * in + k]) * wv[std::size_t(o) * in + k]);
        }
        reads_.worst = std::max(reads_.worst, std::fabs(f.values[std::size_t(r) * out + o] - dot) / size);
      }
    reads_.forward_x.push_back(xv);
  }
  void linear_param_grads(DType type, Operand dy, const float* dy_values, Operand x, float* dw, float* db,
                          float* dw_scratch, float* db_scratch, int rows, int in, int out) override {
    CpuBackend::linear_param_grads(type, dy, dy_values, x, dw, db, dw_scratch, db_scratch, rows, in, out);
    if (type == DType::f32 && in == in_ && out == out_) reads_.grad_x.push_back(values(x, std::size_t(rows) * in));
  }

 private:
  std::vector<float> values(Operand x, std::size_t n) {
    std::vector<float> v(n);
    if (x.dtype == DType::f32) std::copy_n(static_cast<const float*>(x.data), n, v.data());
    else unpack(x, v.data(), n);
    return v;
  }
  Fp32Fc1Reads& reads_;
  int in_, out_;
};

// A module of precision.fp32_layers inside a 16-bit block reads the 16-bit copy its producer wrote,
// widened (it failed with "gemm operand A is neither fp32 nor the compute type"): the MLP in fp32 after
// a 16-bit ln2. fc1's output is the fp32 product of ln2's rounded output (exact in the type) and the
// fp32 weights, and its weight gradient reads that same input, under every recompute mode.
TEST_P(BlockInSixteenBits, AnFp32ModuleTakesItsSixteenBitInputWidened) {
  const DType t = GetParam();
  const ModelConfig m = block_model();
  for (const Recompute recompute : {Recompute::none, Recompute::attention, Recompute::blocks}) {
    SCOPED_TRACE(std::string("recompute ") + enum_name(recompute));
    Fp32Fc1Reads reads;
    run_block(PrecisionPolicy(config_with(t, "blocks.0.mlp.*")),
              std::make_unique<RecordsFp32Fc1>(reads, m.width, m.width * m.mlp_ratio), recompute);
    ASSERT_EQ(reads.forward_x.size(), recompute == Recompute::blocks ? 2u : 1u);
    ASSERT_EQ(reads.grad_x.size(), 1u);
    EXPECT_LT(reads.worst, 1e-5) << "fc1 is not the fp32 product of what it read";
    Buffer x;
    x.resize(reads.forward_x[0].size());
    std::copy(reads.forward_x[0].begin(), reads.forward_x[0].end(), x.data());
    EXPECT_TRUE(all_exact_in(t, x)) << "fc1 read values ln2 (" << dtype_name(t) << ") did not round to";
    EXPECT_GT(*std::max_element(reads.forward_x[0].begin(), reads.forward_x[0].end()), 0.0f);
    for (const auto& again : reads.forward_x) EXPECT_EQ(again, reads.forward_x[0]);
    EXPECT_EQ(reads.grad_x[0], reads.forward_x[0]);
  }
}

// Modules kept in fp32 beside 16-bit ones, each way round (an fp32 module reading a 16-bit output
// widened, a 16-bit module reading an fp32 output rounded by its products): the block runs, stays near
// the fp32 block, and gives the same bits under every recompute mode and where the backend writes
// copy_only outputs' 16-bit copies alone (their fp32 values poisoned).
TEST_P(BlockInSixteenBits, ModulesInFp32BesideSixteenBitOnesGiveTheSameBitsEveryWay) {
  const DType t = GetParam();
  const BlockRun fp32 = run_block(PrecisionPolicy());
  for (const char* globs : {"blocks.0.mlp.*", "blocks.0.attn.*", "blocks.0.attn.qkv,blocks.0.mlp.fc1",
                            "blocks.0.ln1,blocks.0.ln2,blocks.0.mlp.fc2"}) {
    SCOPED_TRACE(globs);
    const PrecisionPolicy policy(config_with(t, globs));
    const BlockRun ref = run_block(policy);
    EXPECT_LT(relative_error(ref.y, fp32.y), t == DType::f16 ? 5e-3 : 3e-2);
    EXPECT_LT(relative_error(ref.grads, fp32.grads), t == DType::f16 ? 5e-3 : 3e-2);
    EXPECT_GT(relative_error(ref.grads, fp32.grads), 0.0);
    for (const Recompute recompute : {Recompute::none, Recompute::attention, Recompute::blocks}) {
      SCOPED_TRACE(std::string("recompute ") + enum_name(recompute));
      const BlockRun again = run_block(policy, std::make_unique<SixteenBitOutputsOnly>(true), recompute);
      EXPECT_EQ(relative_error(again.y, ref.y), 0.0);
      EXPECT_EQ(relative_error(again.dx, ref.dx), 0.0);
      EXPECT_EQ(relative_error(again.grads, ref.grads), 0.0);
      EXPECT_EQ(again.act_absmax, ref.act_absmax);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fp16AndBf16, BlockInSixteenBits, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace avtrain
