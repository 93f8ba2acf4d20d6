#pragma once
// The one kernel interface. Layers call only these ops; a backend (cpu/, cuda/) implements
// them. Pointers are to the backend's memory; every matrix is row-major. Ops that produce
// parameter gradients ACCUMULATE (+=) into them, so micro-batches sum without extra passes.
// Nothing here knows of layers, ranks or stages.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.hpp"
#include "core/fp8.hpp"
#include "core/stochastic_round.hpp"
#include "core/tensor_memory.hpp"

namespace avtrain {

enum class Trans { no, yes };

// A tensor an op reads, in its storage type: fp32 values, or fp16/bf16 bit patterns. `scale` is for
// the types that carry a per-tensor scale (an fp32 in tensor memory); null for fp32, fp16 and bf16.
struct Operand {
  const void* data;
  DType dtype;
  const float* scale = nullptr;
};
inline Operand fp32(const float* x) { return {x, DType::f32}; }

// A tensor an op writes in its storage type: the writable Operand (`scale` as there).
struct Target {
  void* data;
  DType dtype;
  float* scale = nullptr;
};

// What an op that rounds its results writes: their fp32 values, rounded to `copy.dtype` (fp32: not
// rounded), and, where copy.data is not null, the same values in that storage type (fp16/bf16: their
// bit patterns) in the same pass. `copy_only`: the caller reads the copy alone, so the values are the
// op's scratch, undefined after: a backend may write the copy without them (CUDA under device.fused:
// cuBLASLt's and the fused attention's 16-bit outputs), with the bits rounding the values would give.
struct Output {
  float* values;
  Target copy{nullptr, DType::f32};
  bool copy_only = false;
  DType dtype() const { return copy.dtype; }
  Operand read_copy() const { return {copy.data, copy.dtype, copy.scale}; }
  // What a reader of the result takes: the copy where the op was asked for it alone, else the values.
  Operand result() const { return copy_only ? read_copy() : fp32(values); }
};
// Values in fp32 (nothing rounded, no copy).
inline Output fp32_out(float* values) { return {values, {nullptr, DType::f32}, false}; }
// Values rounded to `type`, and its copy written to `copy` when that is not null.
inline Output rounded(float* values, DType type, void* copy = nullptr) { return {values, {copy, type}, false}; }
// The copy in `type` alone (not fp32): `scratch` the op's fp32 scratch.
inline Output copy_only(float* scratch, DType type, void* copy) { return {scratch, {copy, type}, true}; }

// How AdamW writes an update to weights narrower than fp32 (Backend::adamw).
struct WeightRounding {
  Rounding rounding = Rounding::nearest;
  std::uint64_t key = 0;   // the parameter's key (its name)
  std::size_t first = 0;   // w's first element within its parameter: any cut into parts draws the same bits
};

class Backend : public TensorMemory {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual void set_threads(int threads) = 0;
  // Floating-point operations issued through matrix products so far (2 M N K each).
  virtual double gemm_flops() const = 0;

  // ---- memory (the TensorMemory interface): where this backend's tensors live, host memory for
  // the CPU, device memory for CUDA. allocate() returns zeroed, 256-byte aligned memory;
  // upload/download copy to and from host memory and return when the copy is done. A run installs
  // its backend as the tensor memory (TensorMemoryScope) so the model's buffers live there.
  // synchronize() waits for every op issued.
  virtual void synchronize() = 0;
  // Bytes this process's tensors can still have, what a memory estimate is held against: on the CPU the
  // host's available memory (MemAvailable), on a GPU its arena's capacity, or its free memory before one.
  virtual std::size_t memory_for_tensors() const = 0;

  // ---- the micro-batch's input: a copy from host to tensor memory that does not hold up the ops.
  class InputUpload {
   public:
    virtual ~InputUpload() = default;
    // Starts copying `bytes` of host memory at src to dst (tensor memory) and returns; src may change
    // at once (it is first copied into the upload's own host buffer, page-locked on CUDA). The copy
    // waits for the ops issued before it (they may still read dst) and runs beside those issued
    // after it, until ready().
    virtual void start(void* dst, const void* src, std::size_t bytes) = 0;
    // The ops issued from now on wait for the copy started last (on the device; the host goes on).
    virtual void ready() = 0;
  };
  // The default (the CPU) copies at once, as upload(); CUDA copies on a stream of its own from
  // page-locked memory, the compute stream waiting for an event of the copy.
  virtual std::unique_ptr<InputUpload> make_input_upload();

  // ---- matrix products: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, C in fp32.
  // `compute` is the type the products are taken in, accumulated in fp32 (mixed precision: fp16
  // or bf16 operands, fp32 accumulation). Each operand is taken in `compute`, as autocast casts a
  // module's inputs: stored in `compute` it is read as it is; stored in fp32 for a 16-bit product it
  // is rounded to `compute` (nearest even; the layers' fp32 operands mostly hold values exact in it
  // already, rounded where they were written); stored in fp16/bf16 for an fp32 product (a module of
  // precision.fp32_layers reading a 16-bit module's output) it is widened, exactly. Any other pair
  // (bf16 in an fp16 product) is refused.
  // FP8 products (`compute` e4m3 or e5m2, the same: an FP8 product): both operands fp8, each in its
  // own format (E4M3 x E4M3 forward, E5M2 x E4M3 backward) with its scale, values code / scale;
  // C = alpha * (1 / scale_a) * (1 / scale_b) * (sum of the codes' products in fp32) + beta * C, as
  // precision/fp8_gemm_reference (the CPU emulates it exactly; CUDA: cuBLASLt's FP8 matmul).
  virtual void gemm(DType compute, Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda,
                    Operand B, int ldb, float beta, float* C, int ldc) = 0;
  void gemm(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
            int ldb, float beta, float* C, int ldc) {
    gemm(DType::f32, ta, tb, M, N, K, alpha, fp32(A), lda, fp32(B), ldb, beta, C, ldc);
  }
  // The engine 16-bit products of this type run on, for logs and run.json.
  virtual std::string gemm_engine(DType compute) const = 0;

  // ---- storage conversions (round to nearest even, subnormals, overflow to inf, NaN kept)
  // x.values rounded to x's type in place; its copy also written unless copy.data is null.
  virtual void round_to(Output x, std::size_t n) = 0;
  // x's fp32 values stored in `packed`'s type (not fp32), and back. fp8: pack quantizes, codes =
  // fp8(x * *packed.scale) rounded to nearest even and saturating (core/fp8's quantize_fp8; the amax
  // a delayed scaling records comes from abs_max_into of x); unpack gives code * (1 / scale).
  virtual void pack(const float* x, Target packed, std::size_t n) = 0;
  virtual void unpack(Operand packed, float* x, std::size_t n) = 0;
  // A tensor quantized for an FP8 product in one op: codes = pack of x's values into `codes` (an fp8
  // Target with its scale); x in fp32 or a 16-bit copy read as its values (`scratch`: n floats a
  // backend may use for a 16-bit x's values; null for an fp32 x). Where stats is not null, what the
  // cast did is folded into *stats (Fp8CastStats::fold; in the backend's memory, so a device runs on):
  // the amax a delayed scaling records, the smallest non-zero |x|, the underflow and saturation
  // counts at the scale used (layers.csv's fp8 columns), all in the same pass over x.
  virtual void quantize(Operand x, Target codes, std::size_t n, Fp8CastStats* stats, float* scratch) = 0;

  // ---- elementwise and small reductions
  virtual void fill(float* x, std::size_t n, float value) = 0;
  virtual void add(float* y, const float* x, std::size_t n) = 0;              // y += x
  virtual void scale(float* x, std::size_t n, float a) = 0;                   // x *= a
  virtual void fill_rows(float* y, const float* row, int rows, int cols) = 0; // y[r,:] = row
  // dbias += sum_r dy[r,:]; dy's values in fp32 or its stored copy read as it is (widening is exact:
  // a 16-bit copy gives the bits its fp32 values give).
  virtual void bias_grad(Operand dy, float* dbias, int rows, int cols) = 0;
  virtual void gelu_forward(const float* x, float* y, std::size_t n) = 0;     // exact (erf) GELU
  // dx = dy * gelu'(x); x in fp32 (dx may be x) or a kept 16-bit copy read as it is (exact).
  virtual void gelu_backward(const float* dy, Operand x, float* dx, std::size_t n) = 0;
  virtual double sum_squares(const float* x, std::size_t n) = 0;
  // The largest |x| (NaN where any is NaN); x in fp32 or a stored copy read as its values (widening
  // is exact: the bits its fp32 values give; NaN stays NaN, inf inf).
  virtual float abs_max(Operand x, std::size_t n) = 0;
  // One pass of the numbers layers.csv reports for a gradient tensor.
  struct TensorStats {
    double sum_squares = 0;
    std::size_t nonfinite = 0;
    std::size_t nonzero = 0;  // entries != 0, NaN included
    std::size_t below = 0;  // nonzero entries with |x| < the threshold
  };
  virtual TensorStats tensor_stats(const float* x, std::size_t n, float threshold) = 0;
  // The same for many tensors in one pass and one return to the host: out[i] describes
  // x[spans[i].offset, + spans[i].size) with the bits tensor_stats gives it.
  struct Span {
    std::size_t offset, size;
  };
  virtual void tensor_stats_many(const float* x, const Span* spans, int count, float threshold, TensorStats* out) = 0;
  // The same, left in the backend's memory (`result`: count entries of tensor memory) for ops issued
  // after it (update_gate) and a download later, without a return to the host.
  virtual void tensor_stats_many_into(const float* x, const Span* spans, int count, float threshold,
                                      TensorStats* result) = 0;
  // Folded into a result in the backend's memory without returning to the host, so a device runs
  // on; the result is read back once per step. *result = max(*result, |max| of x), NaN when either
  // is NaN (as abs_max, x as it takes it; *result starts at 0 or above); *result += sum_squares(x)
  // (the same bits as sum_squares, added once).
  virtual void abs_max_into(Operand x, std::size_t n, float* result) = 0;
  virtual void sum_squares_into(const float* x, std::size_t n, double* result) = 0;

  // ---- fused passes: one op for what the layers would otherwise do in several passes over memory.
  // Each default runs the separate ops (their bits); a backend may fuse them (CUDA: device.fused).
  // Results go to an Output: rounded to its type, its copy written where it has one (fp32: nothing
  // rounded, nothing written there); where it is copy_only, the backend may write the copy alone.
  // The linear layer's forward: y[rows, out] = x[rows, in] W[out, in]^T (+ bias), products in `type`,
  // rounded to y's type. Default: fill_rows (the bias), gemm with beta 1, round_to.
  virtual void linear_forward(DType type, Operand x, Operand w, const float* bias, Output y, int rows, int in,
                              int out);
  // y = round(y + x) (a residual; y.values read and written). Default: add, round_to.
  virtual void add_round(Output y, const float* x, std::size_t n);
  // y = round(gelu(x)). Default: gelu_forward, round_to.
  virtual void gelu_round(const float* x, Output y, std::size_t n);
  // A linear layer with a GELU after it (the MLP's first layer): f = linear_forward's y, then
  // g = round(gelu(f)). Default: linear_forward, gelu_round (g from f's values; where f is copy_only,
  // its values are still written by the default's linear_forward).
  virtual void linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, Output f, Output g, int rows,
                                   int in, int out);
  // The gradient at a GELU's input: dx = round(dy * gelu'(x)) (x as gelu_backward takes it; dx.values
  // may be dy). Default: gelu_backward, round_to.
  virtual void gelu_backward_round(const float* dy, Operand x, Output dx, std::size_t n);
  // acc += round(x) (a micro-batch's gradient in the module's type added to the fp32 main grads);
  // x is scratch: left rounded or as it was. Default: round_to, add.
  virtual void accumulate_rounded(DType type, float* acc, float* x, std::size_t n);
  // The linear layer's parameter gradients from a micro-batch: dW[out, in] += dy^T x and, when db is not
  // null, db[out] += the column sums of dy. dy[rows, out] comes as dy_values (fp32) and as dy, the
  // operand the product reads (its 16-bit copy or dy_values). fp32: the product accumulates into dW
  // (beta 1) and bias_grad into db. 16-bit types: both are taken in `type` into dw_scratch (out x in
  // floats) and db_scratch (out floats), then added as accumulate_rounded (acc += round(x)). dy_values
  // may be null where dy is 16-bit and its fp32 values were never written (a copy_only output, fused
  // attention's dqkv): db then from dy's patterns (bias_grad of that operand, the same bits). Default:
  // those separate ops.
  virtual void linear_param_grads(DType type, Operand dy, const float* dy_values, Operand x, float* dw, float* db,
                                  float* dw_scratch, float* db_scratch, int rows, int in, int out);

  // ---- normalisation; statistics always in fp32
  // LayerNorm over the last dimension, y rounded to its type (its copy written where it has one).
  virtual void layernorm_forward(const float* x, const float* gamma, const float* beta, Output y, float* mean,
                                 float* rstd, int rows, int dim, float eps) = 0;
  // x as forward read it: fp32, or a kept 16-bit copy read as it is (exact).
  virtual void layernorm_backward(const float* dy, Operand x, const float* gamma,
                                  const float* mean, const float* rstd, float* dx, float* dgamma,
                                  float* dbeta, int rows, int dim) = 0;
  // BatchNorm over channels of x[rows, ch], statistics over rows with row_mask=1; masked rows give 0.
  // training: batch statistics (mean, rstd saved for backward); the batch's mean and unbiased
  // variance are added to stat_sums[0, ch) and stat_sums[ch, 2 ch) (BatchNorm1d folds the sums of a
  // step's micro-batches into its running statistics once per step).
  virtual void batchnorm_forward_train(const float* x, const std::uint8_t* row_mask, const float* gamma,
                                       const float* beta, float* y, float* mean, float* rstd,
                                       float* stat_sums, int rows, int ch, float eps) = 0;
  virtual void batchnorm_forward_eval(const float* x, const std::uint8_t* row_mask, const float* gamma,
                                      const float* beta, const float* running_mean,
                                      const float* running_var, float* y, int rows, int ch,
                                      float eps) = 0;
  virtual void batchnorm_backward(const float* dy, const float* x, const std::uint8_t* row_mask,
                                  const float* gamma, const float* mean, const float* rstd, float* dx,
                                  float* dgamma, float* dbeta, int rows, int ch) = 0;

  // ---- multi-head self-attention with a key-padding mask, fused per (sample, head).
  // qkv[B, L, 3, H, hd] (the qkv projection's output as is); ctx[B, L, H*hd] the heads' outputs side
  // by side. `compute` is the type the four products take their operands in, accumulating in fp32, as
  // gemm: q, k, v must be exact in it; the probabilities (forward) and the output gradient and dS
  // (backward) are rounded to it on their way into a product, as 16-bit attention kernels do. The
  // softmax and its backward run in fp32; fp32 rounds nothing. qkv (and backward's kept p) come as
  // operands, fp32 or stored in `compute` (a layer's saved 16-bit copies, read as they are).
  // p[B, H, L, L] gets the probabilities kept for backward (masked keys exactly 0, rounded to
  // `compute`), or is null: then no L x L tensor outlives the head it belongs to (on a GPU, a group
  // of samples' scratch). row_stats[B, H, L, 2], when not null, gets each query row's softmax
  // statistics: the largest scaled score over the valid keys and 1 / the sum of their exponentials.
  // ctx is rounded to its type (its copy written where it has one); copy_only: see below.
  virtual void attention_forward(DType compute, Operand qkv, const std::uint8_t* key_mask, float* p,
                                 float* row_stats, Output ctx, int B, int L, int H, int hd) = 0;
  // What backward reads the probabilities from: p as forward returned it (kept), or p recomputed from
  // q, k, the mask and forward's row statistics (the same scores, the same exponentials, the same
  // roundings: the same bits), then rounded to `kept_as` as a copy kept in that type would have been.
  // `out` is forward's output ctx as the layer kept it (or null): fused attention's backward reads
  // each row's dot(dctx, ctx) from it instead of summing dP * P over the keys.
  struct AttentionProbs {
    Operand p{nullptr, DType::f32};
    const std::uint8_t* key_mask = nullptr;
    const float* row_stats = nullptr;
    DType kept_as = DType::f32;
    Operand out{nullptr, DType::f32};
    static AttentionProbs kept(Operand p) { return {p, nullptr, nullptr, DType::f32, {nullptr, DType::f32}}; }
    static AttentionProbs recomputed(const std::uint8_t* key_mask, const float* row_stats, DType kept_as,
                                     Operand out = {nullptr, DType::f32}) {
      return {{nullptr, DType::f32}, key_mask, row_stats, kept_as, out};
    }
    bool recompute() const { return p.data == nullptr; }
  };
  // True where attention in `compute` with heads of head_dim runs fused (FlashAttention: tiles of q
  // against streamed k, v with an online softmax; no L x L tensor in memory) when forward is given no
  // p, and backward then recomputes from the row statistics and reads forward's output (probs.out).
  // Its results differ from the unfused path's in the roundings of a 16-bit type (p is rounded before
  // it is normalised; dot(dctx, ctx) replaces rowsum(dP * P)), and repeat bit for bit.
  virtual bool fuses_attention(DType /*compute*/, int /*head_dim*/) const { return false; }
  // Which engine runs that fused attention, in words for the log and run.json (empty where there is one
  // engine); where fusing was asked for but attention runs unfused, why (empty where it was not asked
  // for). Its row_stats may hold (lse, 1) instead of (max, 1 / sum): the same
  // probabilities, exp(s - max) / sum = exp(s - lse); a backward reads what its forward wrote.
  virtual std::string attention_engine(DType /*compute*/, int /*head_dim*/) const { return {}; }
  // dctx[B, L, H*hd] -> dqkv[B, L, 3, H, hd] (written, not accumulated), rounded to its type (its copy
  // written where it has one).
  // Outputs copy_only in `compute` (bf16 or fp16; the layers ask for them where attention is fused and
  // its products are in qkv's type): the output's and the gradient's copies, the bits round_to of ctx
  // and dqkv would give (a sample without a valid key: 0), written where the output projection and the
  // qkv projection's backward read them; the values are the ops' scratch, undefined after. The CPU
  // writes the values and rounds them; CUDA, where attention runs fused (forward given no p), writes
  // the copies from its engines (cuDNN's O and dq/dk/dv in place, the own kernel's epilogues): no pass
  // widening them to fp32 and none rounding them back.
  virtual void attention_backward(DType compute, Operand qkv, const AttentionProbs& probs, const float* dctx,
                                  Output dqkv, int B, int L, int H, int hd) = 0;

  // ---- audio front end (no parameters, forward only)
  // frames[B, T, win] = audio[b, t*hop + i] * window[i]
  virtual void frame_signal(const float* audio, const float* window, float* frames, int B,
                            std::int64_t A, int T, int win, int hop) = 0;
  // spec[rows, 2*nb] = [re | im]  ->  power[rows, nb]
  virtual void power_spectrum(const float* spec, float* power, int rows, int nb) = 0;
  // x = log(x + eps) where row_mask, 0 elsewhere; x[rows, cols]
  virtual void masked_log(float* x, const std::uint8_t* row_mask, int rows, int cols, float eps) = 0;
  // Conv1d im2col, channels last: col[B, To, k*C]... col[b, t, c*k + j] = x[b, t*stride + j - pad, c]
  virtual void im2col_1d(const float* x, float* col, int B, int T, int C, int k, int stride, int pad,
                         int To) = 0;
  virtual void col2im_1d(const float* dcol, float* dx, int B, int T, int C, int k, int stride, int pad,
                         int To) = 0;  // dx = (overwritten) sum of dcol contributions

  // ---- video: uint8 video[B, F, H, W, C] -> patches[B, Nt*Nh*Nw, tp*p*p*C], value v/127.5 - 1
  virtual void video_patches(const std::uint8_t* video, float* patches, int B, int F, int H, int W,
                             int C, int tp, int p) = 0;

  // ---- token assembly
  // x[rows, D] = 0 where row_mask = 0
  virtual void mask_rows(float* x, const std::uint8_t* row_mask, int rows, int dim) = 0;
  // x[B, L, D]: rows [0, Ta) from a[B, Ta, D], rows [Ta, L) from v[B, L-Ta, D]; then + pos[L, D]
  // + modality[0 or 1, D]
  virtual void embed_forward(const float* a, const float* v, const float* pos, const float* modality,
                             float* x, int B, int Ta, int L, int D) = 0;
  virtual void embed_backward(const float* dx, float* da, float* dv, float* dpos, float* dmodality,
                              int B, int Ta, int L, int D) = 0;
  // ---- context parallelism (parallel.cp): a sample's tokens cut over ranks, heads exchanged
  // y[r, :] = x[index[r], :] for r < rows; index (in tensor memory) -1: a row of zeros.
  virtual void gather_rows(const float* x, const std::int32_t* index, float* y, int rows, int cols) = 0;
  // y[index[r], :] = x[r, :] for every r < rows with index[r] >= 0; the other rows of y are left as
  // they are (the indices name distinct rows).
  virtual void scatter_rows(const float* x, const std::int32_t* index, float* y, int rows, int cols) = 0;
  // x viewed as [n0, n1] blocks of `block_bytes` bytes each: y[j, i] = x[i, j] (any element type;
  // how the Ulysses all-to-all puts each member's heads, or tokens, next to each other).
  virtual void transpose_blocks(const void* x, void* y, int n0, int n1, std::size_t block_bytes) = 0;
  // pooled[B, D] = mean over tokens [begin, end) with mask of x[B, L, D]: their sum divided by their
  // count, or by counts[b] where counts (tensor memory, [B]) is given: the sample's tokens over every
  // part of it under parallel.cp, whose pools are then summed over the parts.
  virtual void masked_mean_pool_forward(const float* x, const std::uint8_t* mask, const float* counts,
                                        float* pooled, int B, int L, int D, int begin, int end) = 0;
  virtual void masked_mean_pool_backward(const float* dpooled, const std::uint8_t* mask, const float* counts,
                                         float* dx, int B, int L, int D, int begin, int end) = 0;  // dx +=
  // out[B, Da+Db] = [a | b] and back
  virtual void concat_columns(const float* a, const float* b, float* out, int B, int Da, int Db) = 0;
  virtual void split_columns(const float* d, float* da, float* db, int B, int Da, int Db) = 0;

  // ---- losses (fp32). Return the mean loss over rows and write the gradient of
  // (grad_scale * loss) into dlogits.
  virtual double cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits,
                               int rows, int classes, float grad_scale, int* correct) = 0;
  // Sigmoid binary cross-entropy with targets[rows, classes] in [0, 1] (multi-hot, or mixed by mixup):
  // the mean over rows and classes of max(x, 0) - x t + log(1 + exp(-|x|)) (PyTorch's
  // BCEWithLogitsLoss), stable for any logit; dlogits = grad_scale * (sigmoid(x) - t) / (rows classes).
  virtual double binary_cross_entropy(const float* logits, const float* targets, float* dlogits, int rows,
                                      int classes, float grad_scale) = 0;
  // Symmetric InfoNCE between row-normalised a[B, D] and b[B, D] at temperature tau; accumulates
  // the gradient of grad_scale * loss into da, db.
  virtual double info_nce(const float* a, const float* b, float* da, float* db, int B, int D,
                          float tau, float grad_scale) = 0;

  // ---- optimizer: AdamW, bias-corrected; decay applied as w -= lr*wd*w. The weights w are fp32 (master
  // weights, updated in place) or bf16 (precision.master_weights none: read widened, exact; the update
  // computed in fp32 by the same expression with fp32 moments, written back rounded as `rounding` says;
  // element i's random bits rounding_bits(rounding_stream(rounding.key, step), rounding.first + i),
  // core/stochastic_round.hpp). Any other type is refused.
  virtual void adamw(Target w, const float* g, float* m, float* v, std::size_t n, float lr, float beta1, float beta2,
                     float eps, float weight_decay, int step, WeightRounding rounding = {}) = 0;
  // One AdamW update of many tensors (multi-tensor apply), as `gate` (tensor memory, read where the
  // update runs) says: gate[0] the factor the gradients are first multiplied by (the unscale and the
  // clip: as scale() does, in place), gate[1] nonzero to skip the step (nothing is written). Tensor t
  // is elements [offset, offset + size) of w, g, m, v; its new masters then go to its copy: their
  // 16-bit patterns in copy_type (a working copy), fp32 values, or nowhere (copy null). The default
  // reads the gate back and runs scale, adamw and pack or copy per tensor; a backend may fuse them
  // into one pass with the same bits that reads the gate itself.
  //
  // in_place (precision.master_weights none): the tensor has no fp32 master in w (w's elements of it
  // are not read; w may be null when no tensor has one). Its weights are `copy` itself, updated as
  // adamw() updates weights of copy_type, rounded as {rounding, rounding_key, first} say.
  struct AdamWTensor {
    std::size_t offset, size;
    float weight_decay;
    void* copy;
    DType copy_type;
    bool in_place = false;
    Rounding rounding = Rounding::nearest;
    std::uint64_t rounding_key = 0;
    std::size_t first = 0;
  };
  virtual void adamw_tensors(float* w, float* g, float* m, float* v, const AdamWTensor* tensors, int count, float lr,
                             float beta1, float beta2, float eps, const float* gate, int step);
  // The update's gate decided where the update runs, from gradient statistics there (the entries
  // tensor_stats_many_into left; backend/update_gate.hpp's decide_update, the host's expression):
  // so a device goes from the statistics to the update without a return to the host.
  struct UpdateRule {
    const int* params = nullptr;        // tensor memory: the entries of `stats` that count, module by module
    const int* module_first = nullptr;  // tensor memory: module m's are params[module_first[m], module_first[m + 1])
    int modules = 0;
    double loss_scale = 1;   // the gradients are accumulated times this
    float max_norm = 0;      // the clip (0: none)
    bool loss_nonfinite = false;  // the loss (known on the host) is not finite: skip
  };
  virtual void update_gate(const TensorStats* stats, const UpdateRule& rule, float* gate) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace avtrain
