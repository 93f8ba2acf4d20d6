#include "model/transformer_block.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "model/saved_tensor.hpp"

namespace avtrain {

struct TransformerBlock::State final : LayerState {
  SavedTensor x, a, qkv, p, ctx, h, b, f1, g;
  // parallel.cp: attention's output as attention wrote it (every token, this part's heads), which a
  // recomputation of p reads; qkv and p are kept so too, ctx as proj reads it (this part's tokens).
  SavedTensor ctx_heads;
  Buffer row_stats;  // [B, H, L, 2] the softmax statistics, when p is not kept
  Buffer ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
  std::size_t bytes() const override {
    return total_bytes(x, a, qkv, p, ctx, ctx_heads, h, b, f1, g, row_stats, ln1_mean, ln1_rstd, ln2_mean, ln2_rstd);
  }
};

namespace {
// Workspace slots, named by what they hold in forward; kX: the input read back for a recomputation;
// kQkvHeads, kCtxHeads: under parallel.cp, qkv and ctx (and their gradients) in attention's layout.
enum Slot { kA, kQkv, kP, kCtx, kH, kB, kF1, kG, kX, kQkvHeads, kCtxHeads };

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


Output TransformerBlock::grad_output(const Linear& layer, float* dy, std::size_t count, bool copy_only) {
  if (layer.dtype() == DType::f32) return fp32_out(dy);
  ws_.grad16.resize(count);
  return copy_only ? avtrain::copy_only(dy, layer.dtype(), ws_.grad16.data())
                   : rounded(dy, layer.dtype(), ws_.grad16.data());
}

Output TransformerBlock::round_grad(const Linear& layer, float* dy, std::size_t count, const float* plus) {
  const Output y = grad_output(layer, dy, count);
  if (plus) be_.add_round(y, plus, count);
  else be_.round_to(y, count);
  return y;
}

bool TransformerBlock::attention_fused(const Backend& be, DType qkv, int head_dim) {
  const DType products = attention_products(qkv);
  return products != DType::f32 && be.fuses_attention(products, head_dim);
}

bool TransformerBlock::attention_copy_only() const {
  return fused_attention() && attention_products() == qkv_.dtype();
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
  // Where the layer reads only an output's 16-bit copy (LayerNorm's, qkv's when attention's products
  // read it, ctx's when attention is fused in qkv's type (and backward's dqkv: attention_copy_only),
  // f1's and g's: fc2, GELU's backward), it asks for that copy alone (copy_only): a backend may write
  // it without the fp32 values (CUDA under device.fused), and the layer reads only the copy; its
  // statistics are the copy's |max|, the bits of the rounded fp32 values'.
  const auto note = [&](const std::string& module, Operand y, std::size_t count) {
    if (out) note_activation(be_, flow, module, y, count);
  };

  Buffer& a = ws_[kA];
  a.resize(n);
  st.ln1_mean.resize(rows);
  st.ln1_rstd.resize(rows);
  // An input only an FP8 linear reads in backward (a, ctx without fused attention, b, g) is kept as
  // the linear's E4M3 copy (SavedTensor's for_fp8; keep_* below).
  Buffer16* a16 = ws_.fp8_input_for(qkv_.fp8(), ln1_.dtype(), 0);
  SavedTensor* keep_a = a16 ? &st.a : nullptr;
  st.a.keep_written(a, ln1_.dtype(), true, [&](Output y) {
    ln1_.forward(be_, x, y, st.ln1_mean.data(), st.ln1_rstd.data(), rows);
    note(ln1_.module(), y.result(), n);
  }, a16);

  Buffer& qkv = ws_[kQkv];
  qkv.resize(3 * n);
  // In bf16 the products read the kept 16-bit copy of qkv as it is.
  const DType products = attention_products();
  // parallel.cp: attention runs on every token of the sequence (Lk, the parts' one after the other)
  // for this part's Hh heads: qkv goes there after its linear, ctx comes back before proj, each moved
  // in its storage type (16-bit: the copy alone, half the bytes) and kept so (model/context_exchange.hpp).
  const int parts = flow.parts(), Hh = H / parts, Lk = parts * L;
  const DType qt = qkv_.dtype();
  require(parts == 1 || (H % parts == 0 && !qkv_.fp8() && !proj_.fp8()),
          "internal: " + name() + " cut over " + std::to_string(parts) + " parts");
  const float* qkv_values = nullptr;
  if (parts == 1) {
    qkv_values = st.qkv.keep_written(qkv, qkv_.dtype(), products != DType::f32, [&](Output y) {
      qkv_.forward(be_, st.a.operand(), y, rows, keep_a);
      note(qkv_.module(), y.result(), 3 * n);
    });
  } else {
    Buffer& heads = ws_[kQkvHeads];
    heads.resize(3 * n);
    if (qt == DType::f32) {
      qkv_.forward(be_, st.a.operand(), fp32_out(qkv.data()), rows, keep_a);
      note(qkv_.module(), fp32(qkv.data()), 3 * n);
      flow.context->to_heads(qkv.data(), heads.data(), B, L, 3, head_bytes(Hh, qt));
      qkv_values = st.qkv.keep(be_, heads, qt);
    } else {
      ws_.exchange16.resize(3 * n);
      const Output y = avtrain::copy_only(qkv.data(), qt, ws_.exchange16.data());
      qkv_.forward(be_, st.a.operand(), y, rows, keep_a);
      note(qkv_.module(), y.result(), 3 * n);
      st.qkv.keep_written(heads, qt, true, [&](Output kept) {
        flow.context->to_heads(ws_.exchange16.data(), kept.copy.data, B, L, 3, head_bytes(Hh, qt));
      });
      if (products == DType::f32) qkv_values = st.qkv.load(be_, heads);  // fp16: fp32 products
    }
  }
  Buffer& ctx = ws_[kCtx];
  ctx.resize(n);
  // Attention's output: into ctx, or under parallel.cp into ctx_out (every token, this part's heads)
  // and then, moved from `gathered` (its storage), into ctx (this part's tokens), kept for proj.
  Buffer& ctx_out = parts == 1 ? ctx : ws_[kCtxHeads];
  ctx_out.resize(n);
  const auto to_tokens = [&](const void* gathered) {
    if (qt == DType::f32) {
      flow.context->to_tokens(gathered, ctx.data(), B, L, 1, head_bytes(Hh, qt));
      st.ctx.keep(be_, ctx, qt);
    } else {
      st.ctx.keep_written(ctx, qt, true, [&](Output kept) {
        flow.context->to_tokens(gathered, kept.copy.data, B, L, 1, head_bytes(Hh, qt));
      });
    }
  };
  const Operand qkv_in = products == DType::f32 ? fp32(qkv_values) : st.qkv.operand();
  SavedTensor* keep_ctx = nullptr;  // read by attention's backward too, unless p is kept
  if (recompute_ == Recompute::none && !fused_attention()) {
    Buffer& p = ws_[kP];
    p.resize(std::size_t(B) * Hh * Lk * Lk);
    Buffer16* ctx16 = ws_.fp8_input_for(proj_.fp8(), qkv_.dtype(), 0);
    keep_ctx = ctx16 ? &st.ctx : nullptr;
    if (parts == 1) {
      st.ctx.keep_written(ctx, qkv_.dtype(), false, [&](Output y) {
        be_.attention_forward(products, qkv_in, flow.token_mask.data(), p.data(), nullptr, y, B, L, H, hd);
      }, ctx16);
    } else {
      if (qt != DType::f32) ws_.exchange16.resize(n);
      void* copy = qt == DType::f32 ? nullptr : ws_.exchange16.data();
      be_.attention_forward(products, qkv_in, flow.keys(), p.data(), nullptr, rounded(ctx_out.data(), qt, copy), B, Lk,
                            Hh, hd);
      to_tokens(copy ? copy : ctx_out.data());
    }
    // Products in the storage type return p rounded to it already: kept without another rounding pass.
    if (products == qkv_.dtype())
      st.p.keep(be_, p, qkv_.dtype());
    else
      st.p.round_and_keep(be_, p, qkv_.dtype());
  } else if (parts == 1) {  // backward recomputes p from q, k and these (fused attention: always)
    st.row_stats.resize(std::size_t(B) * H * L * 2);
    st.ctx.keep_written(ctx, qkv_.dtype(), attention_copy_only(), [&](Output y) {
      be_.attention_forward(products, qkv_in, flow.token_mask.data(), nullptr, st.row_stats.data(), y, B, L, H, hd);
    });
  } else {
    st.row_stats.resize(std::size_t(B) * Hh * Lk * 2);
    st.ctx_heads.keep_written(ctx_out, qt, false, [&](Output y) {
      be_.attention_forward(products, qkv_in, flow.keys(), nullptr, st.row_stats.data(), y, B, Lk, Hh, hd);
    });
    to_tokens(st.ctx_heads.operand().data);
  }

  Buffer& h = ws_[kH];
  h.resize(n);
  proj_.forward(be_, st.ctx.operand(), h.data(), rows, keep_ctx);
  note(proj_.module(), fp32(h.data()), n);
  const float* h_values = st.h.keep_written(h, proj_.dtype(), false, [&](Output y) {
    be_.add_round(y, x, n);  // the residual
  });

  Buffer& b = ws_[kB];
  b.resize(n);
  st.ln2_mean.resize(rows);
  st.ln2_rstd.resize(rows);
  Buffer16* b16 = ws_.fp8_input_for(fc1_.fp8(), ln2_.dtype(), 0);
  SavedTensor* keep_b = b16 ? &st.b : nullptr;
  st.b.keep_written(b, ln2_.dtype(), true, [&](Output y) {
    ln2_.forward(be_, h_values, y, st.ln2_mean.data(), st.ln2_rstd.data(), rows);
    note(ln2_.module(), y.result(), n);
  }, b16);

  Buffer& f1 = ws_[kF1];
  Buffer& g = ws_[kG];
  f1.resize(nh);
  g.resize(nh);
  // g's copy beside b's (fc1 reads b as it writes g); under recomputation (no `out`) fc2's forward
  // does not run and backward quantizes g's copy again.
  Buffer16* g16 = ws_.fp8_input_for(fc2_.fp8(), fc1_.dtype(), 1);
  st.f1.keep_written(f1, fc1_.dtype(), true, [&](Output f) {
    st.g.keep_written(g, fc1_.dtype(), true, [&](Output gy) {
      fc1_.forward_gelu(be_, st.b.operand(), f, gy, rows, keep_b);
    }, g16);
    note(fc1_.module(), f.result(), nh);
  });
  if (!out) return;

  out->resize(n);  // in fp32, x's storage was taken over: `out` is another buffer
  fc2_.forward(be_, st.g.operand(), out->data(), rows, g16 ? &st.g : nullptr);
  note(fc2_.module(), fp32(out->data()), n);
  be_.add_round(rounded(out->data(), fc2_.dtype()), h_values, n);  // the residual
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
  fc2_.backward(be_, st.g.operand(), round_grad(fc2_, dout.data(), n), dg.data(), rows);
  note_gradient(be_, flow, fc2_.module(), dg.data(), nh);
  const Output df1 = grad_output(fc1_, dg.data(), nh);
  be_.gelu_backward_round(dg.data(), st.f1.operand(), df1, nh);  // d(f1), in place
  Buffer& db = ws_[kB];
  db.resize(n);
  fc1_.backward(be_, st.b.operand(), df1, db.data(), rows);
  note_gradient(be_, flow, fc1_.module(), db.data(), n);

  Buffer& dh = ws_[kA];
  dh.resize(n);
  ln2_.backward(be_, st.h.operand(), db.data(), st.ln2_mean.data(), st.ln2_rstd.data(), dh.data(), rows);
  const Output dh_out = round_grad(proj_, dh.data(), n, dout.data());  // dh = dout + d(ln2 path)
  note_gradient(be_, flow, ln2_.module(), dh.data(), n);

  Buffer& dctx = db;
  proj_.backward(be_, st.ctx.operand(), dh_out, dctx.data(), rows);
  note_gradient(be_, flow, proj_.module(), dctx.data(), n);
  // In bf16 the products read the kept 16-bit copies of qkv and p as they are; in fp32, fp32 values.
  const DType products = attention_products();
  const Operand qkv = products == DType::f32 ? fp32(st.qkv.load(be_, ws_[kQkv])) : st.qkv.operand();
  // p as kept, or recomputed (and rounded to the type a kept copy has); fused attention also reads
  // forward's output as kept.
  const int parts = flow.parts(), Hh = H / parts, Lk = parts * L;
  const Backend::AttentionProbs p =
      recompute_ != Recompute::none || fused_attention()
          ? Backend::AttentionProbs::recomputed(flow.keys(), st.row_stats.data(), qkv_.dtype(),
                                                (parts == 1 ? st.ctx : st.ctx_heads).operand())
          : Backend::AttentionProbs::kept(products == DType::f32 ? fp32(st.p.load(be_, ws_[kP])) : st.p.operand());
  Buffer& dqkv = ws_[kG];
  dqkv.resize(3 * n);
  Buffer& da = ws_[kF1];
  da.resize(n);
  Output dqkv_out;
  if (parts == 1) {
    // dqkv rounded to qkv's type by the op, its copy alone where attention_copy_only (written by the
    // fused attention itself).
    dqkv_out = grad_output(qkv_, dqkv.data(), 3 * n, attention_copy_only());
    be_.attention_backward(products, qkv, p, dctx.data(), dqkv_out, B, L, H, hd);
  } else {  // parallel.cp: dctx (fp32, as attention reads it) there, dqkv (in qkv's storage type) back
    const DType qt = qkv_.dtype();
    Buffer& dctx_heads = ws_[kCtxHeads];
    Buffer& dqkv_heads = ws_[kQkvHeads];
    dctx_heads.resize(n);
    dqkv_heads.resize(3 * n);
    flow.context->to_heads(dctx.data(), dctx_heads.data(), B, L, 1, head_bytes(Hh, DType::f32));
    if (qt == DType::f32) {
      be_.attention_backward(products, qkv, p, dctx_heads.data(), fp32_out(dqkv_heads.data()), B, Lk, Hh, hd);
      flow.context->to_tokens(dqkv_heads.data(), dqkv.data(), B, L, 3, head_bytes(Hh, qt));
      dqkv_out = fp32_out(dqkv.data());
    } else {
      ws_.exchange16.resize(3 * n);
      be_.attention_backward(products, qkv, p, dctx_heads.data(), rounded(dqkv_heads.data(), qt, ws_.exchange16.data()),
                             B, Lk, Hh, hd);
      dqkv_out = grad_output(qkv_, dqkv.data(), 3 * n, true);  // the copy alone, moved into it
      flow.context->to_tokens(ws_.exchange16.data(), dqkv_out.copy.data, B, L, 3, head_bytes(Hh, qt));
    }
  }
  note_gradient(be_, flow, name() + ".attn", dqkv_out.result(), 3 * n);
  qkv_.backward(be_, st.a.operand(), dqkv_out, da.data(), rows);
  note_gradient(be_, flow, qkv_.module(), da.data(), n);
  ln1_.backward(be_, x_again ? fp32(x_again) : kept.x.operand(), da.data(), st.ln1_mean.data(), st.ln1_rstd.data(), dout.data(), rows);
  be_.add_round(rounded(dout.data(), kept.x.dtype()), dh.data(), n);  // dx = dh + d(ln1 path)
  note_gradient(be_, flow, ln1_.module(), dout.data(), n);
}

}  // namespace avtrain
