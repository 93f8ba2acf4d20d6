#include "model/transformer_block.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "model/saved_tensor.hpp"

namespace avtrain {

struct TransformerBlock::State final : LayerState {
  SavedTensor x, a, qkv, p, ctx, h, b, f1, g;
  Buffer row_stats;  // [B, H, L, 2] the softmax statistics, when p is not kept
  Buffer ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
  std::size_t bytes() const override {
    return total_bytes(x, a, qkv, p, ctx, h, b, f1, g, row_stats, ln1_mean, ln1_rstd, ln2_mean, ln2_rstd);
  }
};

namespace {
// Workspace slots, named by what they hold in forward; kX: the input read back for a recomputation.
enum Slot { kA, kQkv, kP, kCtx, kH, kB, kF1, kG, kX };

std::string block_name(int index) { return "blocks." + std::to_string(index); }
}  // namespace

TransformerBlock::TransformerBlock(Backend& be, ParamStore& params, Workspace& ws, const PrecisionPolicy& policy,
                                   const ModelConfig& m, int index, Recompute recompute)
    : Layer(block_name(index)), be_(be), ws_(ws), D_(m.width), H_(m.heads), hd_(m.width / m.heads),
      hidden_(m.width * m.mlp_ratio), recompute_(recompute),
      ln1_(params, block_name(index) + ".ln1", m.width, policy.of(block_name(index) + ".ln1")),
      qkv_(params, block_name(index) + ".attn.qkv", m.width, 3 * m.width, m.init_std,
           policy.of(block_name(index) + ".attn.qkv")),
      // Residual-branch outputs scaled down with depth (GPT-2).
      proj_(params, block_name(index) + ".attn.proj", m.width, m.width,
            m.init_std / std::sqrt(2.0f * std::max(1, m.depth)), policy.of(block_name(index) + ".attn.proj")),
      ln2_(params, block_name(index) + ".ln2", m.width, policy.of(block_name(index) + ".ln2")),
      fc1_(params, block_name(index) + ".mlp.fc1", m.width, m.width * m.mlp_ratio, m.init_std,
           policy.of(block_name(index) + ".mlp.fc1")),
      fc2_(params, block_name(index) + ".mlp.fc2", m.width * m.mlp_ratio, m.width,
           m.init_std / std::sqrt(2.0f * std::max(1, m.depth)), policy.of(block_name(index) + ".mlp.fc2")) {}

std::unique_ptr<LayerState> TransformerBlock::make_state() const { return std::make_unique<State>(); }

double TransformerBlock::forward_flops(int B, int L) const {
  const double rows = double(B) * L;
  const double linears = 2.0 * rows * (double(D_) * 3 * D_ + double(D_) * D_ + 2.0 * D_ * hidden_);
  return linears + 4.0 * B * H_ * double(L) * L * hd_;  // q k^T and p v
}


std::uint16_t* TransformerBlock::grad16(const Linear& layer, std::size_t count) {
  if (layer.dtype() == DType::f32) return nullptr;
  ws_.grad16.resize(count);
  return ws_.grad16.data();
}

const std::uint16_t* TransformerBlock::round_grad(const Linear& layer, float* dy, std::size_t count, const float* plus) {
  std::uint16_t* dy16 = grad16(layer, count);
  if (plus) be_.add_round(layer.dtype(), dy, plus, dy16, count);
  else be_.round_to(layer.dtype(), dy, dy16, count);
  return dy16;
}

bool TransformerBlock::attention_fused(const Backend& be, DType qkv, int head_dim) {
  const DType products = attention_products(qkv);
  return products != DType::f32 && be.fuses_attention(products, head_dim);
}

bool TransformerBlock::attention_16_only() const {
  return fused_attention() && attention_products() == qkv_.dtype() && be_.writes_16bit_outputs_only(qkv_.dtype());
}

TransformerBlock::State& TransformerBlock::recomputed_state() {
  if (!ws_.recomputed) ws_.recomputed = std::make_unique<State>();
  return static_cast<State&>(*ws_.recomputed);
}

void TransformerBlock::forward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<State&>(state_base);
  const float* x = st.x.keep(be_, flow.x, flow.x_dtype);
  run_forward(flow, x, recompute_ == Recompute::blocks ? recomputed_state() : st, &flow.x);
  flow.x_dtype = fc2_.dtype();
}

void TransformerBlock::run_forward(Flow& flow, const float* x, State& st, Buffer* out) {
  const int B = flow.B, L = flow.L, D = D_, H = H_, hd = hd_, rows = B * L;
  const std::size_t n = std::size_t(rows) * D, nh = std::size_t(rows) * hidden_;
  // Where the backend writes an output's 16-bit copy alone (device.fused), the layer reads only that
  // copy: LayerNorm's, qkv's when attention's products read it, ctx's when attention is fused (and
  // backward's dqkv: attention_16_only), f1's and g's (fc2, GELU's backward);
  // their statistics are the copies' |max|, the bits of the rounded fp32 values'. `written` is the
  // copy an op left: its 16-bit patterns where it wrote those alone, else its fp32 values.
  const auto note = [&](const std::string& module, Operand y, std::size_t count) {
    if (out) note_activation(be_, flow, module, y, count);
  };
  const auto written = [](bool only16, const Buffer& y, const std::uint16_t* y16, DType type) {
    return only16 ? Operand{y16, type} : fp32(y.data());
  };

  Buffer& a = ws_[kA];
  a.resize(n);
  st.ln1_mean.resize(rows);
  st.ln1_rstd.resize(rows);
  // LayerNorm's 16-bit output alone where its readers (qkv's product, fc1's) take that copy.
  const bool a_16_only = ln1_.dtype() != DType::f32 && be_.writes_16bit_outputs_only(ln1_.dtype());
  st.a.keep_written(a, ln1_.dtype(), [&](std::uint16_t* a16) {
    if (a_16_only) ln1_.forward_16(be_, x, a.data(), st.ln1_mean.data(), st.ln1_rstd.data(), rows, a16);
    else ln1_.forward(be_, x, a.data(), st.ln1_mean.data(), st.ln1_rstd.data(), rows, a16);
    note(ln1_.module(), written(a_16_only, a, a16, ln1_.dtype()), n);
  });

  Buffer& qkv = ws_[kQkv];
  qkv.resize(3 * n);
  // In bf16 the products read the kept 16-bit copy of qkv as it is.
  const DType products = attention_products();
  const bool qkv_16_only = products != DType::f32 && be_.writes_16bit_outputs_only(qkv_.dtype());
  const float* qkv_values = st.qkv.keep_written(qkv, qkv_.dtype(), [&](std::uint16_t* qkv16) {
    if (qkv_16_only) qkv_.forward_16(be_, st.a.operand(), qkv.data(), qkv16, rows);
    else qkv_.forward(be_, st.a.operand(), qkv.data(), rows, qkv16);
    note(qkv_.module(), written(qkv_16_only, qkv, qkv16, qkv_.dtype()), 3 * n);
  });
  Buffer& ctx = ws_[kCtx];
  ctx.resize(n);
  const Operand qkv_in = products == DType::f32 ? fp32(qkv_values) : st.qkv.operand();
  if (recompute_ == Recompute::none && !fused_attention()) {
    Buffer& p = ws_[kP];
    p.resize(std::size_t(B) * H * L * L);
    be_.attention_forward(products, qkv_in, flow.token_mask.data(), p.data(), nullptr, ctx.data(), B, L, H, hd);
    // Products in the storage type return p rounded to it already: kept without another rounding pass.
    if (products == qkv_.dtype())
      st.p.keep(be_, p, qkv_.dtype());
    else
      st.p.round_and_keep(be_, p, qkv_.dtype());
    st.ctx.round_and_keep(be_, ctx, qkv_.dtype());
  } else if (attention_16_only()) {  // ctx's 16-bit copy alone, written by the fused attention itself
    st.row_stats.resize(std::size_t(B) * H * L * 2);
    st.ctx.keep_written(ctx, qkv_.dtype(), [&](std::uint16_t* ctx16) {
      be_.attention_forward_16(products, qkv_in, flow.token_mask.data(), st.row_stats.data(), ctx.data(), ctx16, B, L,
                               H, hd);
    });
  } else {  // backward recomputes p from q, k and these (fused attention: always)
    st.row_stats.resize(std::size_t(B) * H * L * 2);
    be_.attention_forward(products, qkv_in, flow.token_mask.data(), nullptr, st.row_stats.data(), ctx.data(), B, L,
                          H, hd);
    st.ctx.round_and_keep(be_, ctx, qkv_.dtype());
  }

  Buffer& h = ws_[kH];
  h.resize(n);
  proj_.forward(be_, st.ctx.operand(), h.data(), rows);
  note(proj_.module(), fp32(h.data()), n);
  const float* h_values = st.h.keep_written(h, proj_.dtype(), [&](std::uint16_t* h16) {
    be_.add_round(proj_.dtype(), h.data(), x, h16, n);  // the residual
  });

  Buffer& b = ws_[kB];
  b.resize(n);
  st.ln2_mean.resize(rows);
  st.ln2_rstd.resize(rows);
  const bool b_16_only = ln2_.dtype() != DType::f32 && be_.writes_16bit_outputs_only(ln2_.dtype());
  st.b.keep_written(b, ln2_.dtype(), [&](std::uint16_t* b16) {
    if (b_16_only) ln2_.forward_16(be_, h_values, b.data(), st.ln2_mean.data(), st.ln2_rstd.data(), rows, b16);
    else ln2_.forward(be_, h_values, b.data(), st.ln2_mean.data(), st.ln2_rstd.data(), rows, b16);
    note(ln2_.module(), written(b_16_only, b, b16, ln2_.dtype()), n);
  });

  Buffer& f1 = ws_[kF1];
  Buffer& g = ws_[kG];
  f1.resize(nh);
  g.resize(nh);
  const bool f1_16_only = fc1_.dtype() != DType::f32 && be_.writes_16bit_outputs_only(fc1_.dtype());
  st.f1.keep_written(f1, fc1_.dtype(), [&](std::uint16_t* f1_16) {
    st.g.keep_written(g, fc1_.dtype(), [&](std::uint16_t* g16) {
      if (f1_16_only) fc1_.forward_gelu_16(be_, st.b.operand(), f1.data(), f1_16, g.data(), g16, rows);
      else fc1_.forward_gelu(be_, st.b.operand(), f1.data(), f1_16, g.data(), g16, rows);
    });
    note(fc1_.module(), written(f1_16_only, f1, f1_16, fc1_.dtype()), nh);
  });
  if (!out) return;

  out->resize(n);  // in fp32, x's storage was taken over: `out` is another buffer
  fc2_.forward(be_, st.g.operand(), out->data(), rows);
  note(fc2_.module(), fp32(out->data()), n);
  be_.add_round(fc2_.dtype(), out->data(), h_values, nullptr, n);  // the residual
}

void TransformerBlock::backward(Flow& flow, LayerState& state_base) {
  auto& kept = static_cast<State&>(state_base);
  // Under recompute = blocks, forward runs again from the kept input into the net's one state.
  const float* x_again = nullptr;
  if (recompute_ == Recompute::blocks) {
    x_again = kept.x.load(be_, ws_[kX]);
    run_forward(flow, x_again, recomputed_state(), nullptr);
  }
  State& st = recompute_ == Recompute::blocks ? recomputed_state() : kept;
  const int B = flow.B, L = flow.L, D = D_, H = H_, hd = hd_, rows = B * L;
  const std::size_t n = std::size_t(rows) * D, nh = std::size_t(rows) * hidden_;
  // Each gradient is rounded to the type of the value it is the gradient of; workspace slots are
  // reused once what they held has been read.
  Buffer& dout = flow.dx;
  Buffer& dg = ws_[kG];
  dg.resize(nh);
  fc2_.backward(be_, st.g.operand(), dout.data(), dg.data(), rows, round_grad(fc2_, dout.data(), n));
  note_gradient(be_, flow, fc2_.module(), dg.data(), nh);
  std::uint16_t* dg16 = grad16(fc1_, nh);
  be_.gelu_backward_round(fc1_.dtype(), dg.data(), st.f1.operand(), dg.data(), dg16, nh);  // d(f1), in place
  Buffer& db = ws_[kB];
  db.resize(n);
  fc1_.backward(be_, st.b.operand(), dg.data(), db.data(), rows, dg16);
  note_gradient(be_, flow, fc1_.module(), db.data(), n);

  Buffer& dh = ws_[kA];
  dh.resize(n);
  ln2_.backward(be_, st.h.operand(), db.data(), st.ln2_mean.data(), st.ln2_rstd.data(), dh.data(), rows);
  const std::uint16_t* dh16 = round_grad(proj_, dh.data(), n, dout.data());  // dh = dout + d(ln2 path)
  note_gradient(be_, flow, ln2_.module(), dh.data(), n);

  Buffer& dctx = db;
  proj_.backward(be_, st.ctx.operand(), dh.data(), dctx.data(), rows, dh16);
  note_gradient(be_, flow, proj_.module(), dctx.data(), n);
  // In bf16 the products read the kept 16-bit copies of qkv and p as they are; in fp32, fp32 values.
  const DType products = attention_products();
  const Operand qkv = products == DType::f32 ? fp32(st.qkv.load(be_, ws_[kQkv])) : st.qkv.operand();
  // p as kept, or recomputed (and rounded to the type a kept copy has); fused attention also reads
  // forward's output as kept.
  const Backend::AttentionProbs p =
      recompute_ != Recompute::none || fused_attention()
          ? Backend::AttentionProbs::recomputed(flow.token_mask.data(), st.row_stats.data(), qkv_.dtype(),
                                                st.ctx.operand())
          : Backend::AttentionProbs::kept(products == DType::f32 ? fp32(st.p.load(be_, ws_[kP])) : st.p.operand());
  Buffer& dqkv = ws_[kG];
  dqkv.resize(3 * n);
  Buffer& da = ws_[kF1];
  da.resize(n);
  if (attention_16_only()) {  // dqkv's 16-bit copy alone, written by the fused attention itself
    std::uint16_t* dqkv16 = grad16(qkv_, 3 * n);
    be_.attention_backward_16(products, qkv, p, dctx.data(), dqkv.data(), dqkv16, B, L, H, hd);
    note_gradient(be_, flow, name() + ".attn", Operand{dqkv16, qkv_.dtype()}, 3 * n);
    qkv_.backward_16(be_, st.a.operand(), dqkv16, da.data(), rows);
  } else {
    be_.attention_backward(products, qkv, p, dctx.data(), dqkv.data(), B, L, H, hd);
    const std::uint16_t* dqkv16 = round_grad(qkv_, dqkv.data(), 3 * n);
    note_gradient(be_, flow, name() + ".attn", dqkv.data(), 3 * n);
    qkv_.backward(be_, st.a.operand(), dqkv.data(), da.data(), rows, dqkv16);
  }
  note_gradient(be_, flow, qkv_.module(), da.data(), n);
  ln1_.backward(be_, x_again ? fp32(x_again) : kept.x.operand(), da.data(), st.ln1_mean.data(), st.ln1_rstd.data(), dout.data(), rows);
  be_.add_round(kept.x.dtype(), dout.data(), dh.data(), nullptr, n);  // dx = dh + d(ln1 path)
  note_gradient(be_, flow, ln1_.module(), dout.data(), n);
}

}  // namespace avtrain
