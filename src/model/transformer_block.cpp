#include "model/transformer_block.hpp"

#include <cmath>
#include <string>
#include <utility>

namespace avtrain {

namespace {
struct BlockState final : LayerState {
  Buffer x, a, ln1_mean, ln1_rstd, qkv, p, ctx, h, b, ln2_mean, ln2_rstd, f1, g;
  Buffer dg, db, dqkv;  // backward scratch: d(g), d(b), d(qkv)
  std::size_t bytes() const override {
    return buffer_bytes({&x, &a, &ln1_mean, &ln1_rstd, &qkv, &p, &ctx, &h, &b, &ln2_mean, &ln2_rstd, &f1, &g,
                         &dg, &db, &dqkv});
  }
};

std::string block_name(int index) { return "blocks." + std::to_string(index); }
}  // namespace

TransformerBlock::TransformerBlock(Backend& be, ParamStore& params, const ModelConfig& m, int index)
    : Layer(block_name(index)), be_(be), D_(m.width), H_(m.heads), hd_(m.width / m.heads),
      hidden_(m.width * m.mlp_ratio),
      ln1_(params, block_name(index) + ".ln1", m.width),
      qkv_(params, block_name(index) + ".attn.qkv", m.width, 3 * m.width, m.init_std),
      // Residual-branch outputs scaled down with depth (GPT-2).
      proj_(params, block_name(index) + ".attn.proj", m.width, m.width,
            m.init_std / std::sqrt(2.0f * std::max(1, m.depth))),
      ln2_(params, block_name(index) + ".ln2", m.width),
      fc1_(params, block_name(index) + ".mlp.fc1", m.width, m.width * m.mlp_ratio, m.init_std),
      fc2_(params, block_name(index) + ".mlp.fc2", m.width * m.mlp_ratio, m.width,
           m.init_std / std::sqrt(2.0f * std::max(1, m.depth))) {}

std::unique_ptr<LayerState> TransformerBlock::make_state() const { return std::make_unique<BlockState>(); }

void TransformerBlock::forward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<BlockState&>(state_base);
  const int B = flow.B, L = flow.L, D = D_, H = H_, hd = hd_, rows = B * L;
  const std::size_t n = std::size_t(rows) * D;
  std::swap(st.x, flow.x);  // keep the input for backward; flow.x becomes the output
  st.a.resize(n);
  st.ln1_mean.resize(rows);
  st.ln1_rstd.resize(rows);
  ln1_.forward(be_, st.x.data(), st.a.data(), st.ln1_mean.data(), st.ln1_rstd.data(), rows);
  note_activation(be_, flow, ln1_.module(), st.a.data(), n);

  st.qkv.resize(3 * n);
  qkv_.forward(be_, st.a.data(), st.qkv.data(), rows);
  note_activation(be_, flow, qkv_.module(), st.qkv.data(), 3 * n);
  st.p.resize(std::size_t(B) * H * L * L);
  st.ctx.resize(n);
  be_.attention_forward(st.qkv.data(), flow.key_mask.data(), st.p.data(), st.ctx.data(), B, L, H, hd);

  st.h.resize(n);
  proj_.forward(be_, st.ctx.data(), st.h.data(), rows);
  note_activation(be_, flow, proj_.module(), st.h.data(), n);
  be_.add(st.h.data(), st.x.data(), n);

  st.b.resize(n);
  st.ln2_mean.resize(rows);
  st.ln2_rstd.resize(rows);
  ln2_.forward(be_, st.h.data(), st.b.data(), st.ln2_mean.data(), st.ln2_rstd.data(), rows);
  note_activation(be_, flow, ln2_.module(), st.b.data(), n);
  st.f1.resize(std::size_t(rows) * hidden_);
  st.g.resize(std::size_t(rows) * hidden_);
  fc1_.forward(be_, st.b.data(), st.f1.data(), rows);
  note_activation(be_, flow, fc1_.module(), st.f1.data(), st.f1.size());
  be_.gelu_forward(st.f1.data(), st.g.data(), st.g.size());
  flow.x.resize(n);
  fc2_.forward(be_, st.g.data(), flow.x.data(), rows);
  note_activation(be_, flow, fc2_.module(), flow.x.data(), n);
  be_.add(flow.x.data(), st.h.data(), n);
}

void TransformerBlock::backward(Flow& flow, LayerState& state_base) {
  auto& st = static_cast<BlockState&>(state_base);
  const int B = flow.B, L = flow.L, D = D_, H = H_, hd = hd_, rows = B * L;
  const std::size_t n = std::size_t(rows) * D;
  // Scratch reuses buffers whose forward values are no longer needed, in reverse order of use.
  Buffer& dout = flow.dx;                  // d(out) = d(h) via the residual
  Buffer& df1 = st.f1;                     // d(f1) overwrites f1 once GELU' has read it
  Buffer& dg = st.dg;
  dg.resize(std::size_t(rows) * hidden_);
  fc2_.backward(be_, st.g.data(), dout.data(), dg.data(), rows);
  be_.gelu_backward(dg.data(), st.f1.data(), df1.data(), dg.size());  // in place: dx == x is allowed
  Buffer& db = st.db;                      // d(b), b = ln2(h)
  db.resize(n);
  fc1_.backward(be_, st.b.data(), df1.data(), db.data(), rows);
  Buffer& dh = st.b;                       // b is consumed by fc1 backward: reuse it for d(h)
  ln2_.backward(be_, st.h.data(), db.data(), st.ln2_mean.data(), st.ln2_rstd.data(), dh.data(), rows);
  be_.add(dh.data(), dout.data(), n);      // dh = dout + d(ln2 path)

  Buffer& dctx = db;                       // d(b) is consumed: reuse it for d(ctx)
  proj_.backward(be_, st.ctx.data(), dh.data(), dctx.data(), rows);
  Buffer& dqkv = st.dqkv;
  dqkv.resize(3 * n);
  be_.attention_backward(st.qkv.data(), st.p.data(), dctx.data(), dqkv.data(), B, L, H, hd);
  Buffer& da = st.ctx;                     // ctx was proj's input, no longer needed
  qkv_.backward(be_, st.a.data(), dqkv.data(), da.data(), rows);
  ln1_.backward(be_, st.x.data(), da.data(), st.ln1_mean.data(), st.ln1_rstd.data(), dout.data(), rows);
  be_.add(dout.data(), dh.data(), n);      // dx = dh + d(ln1 path)
}

}  // namespace avtrain
