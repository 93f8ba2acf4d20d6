#pragma once
// The CPU backend: matrix products through cblas_sgemm (and oneDNN for bf16 where the CPU has
// bf16 units), loops elsewhere (OpenMP).
#include <functional>

#include "backend/backend.hpp"
#include "core/buffer.hpp"

namespace avtrain {

// Loops over fewer elements than this run on one thread: below it, starting a parallel region
// costs more than the second core saves.
inline constexpr std::size_t kParallelMinElements = 16384;

// Not final: tests derive stand-ins from it (a backend that writes copy_only outputs alone, test_precision).
class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  void set_threads(int threads) override;
  double gemm_flops() const override { return gemm_flops_; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p) noexcept override;
  void upload(void* dst, const void* host_src, std::size_t bytes) override;
  void download(void* host_dst, const void* src, std::size_t bytes) override;
  void zero(void* p, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  bool host_accessible() const override { return true; }
  void synchronize() override {}
  std::size_t memory_for_tensors() const override;

  using Backend::gemm;
  void gemm(DType compute, Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda,
            Operand B, int ldb, float beta, float* C, int ldc) override;
  std::string gemm_engine(DType compute) const override;
  // A product is cut into bands of C's rows when M >= N (else of columns: cpu_gemm.cpp). A row-band
  // step works on C's rows [lo, hi) on the band's thread, next to the band's product.
  static bool bands_rows(int M, int N);
  using RowBandStep = std::function<void(int lo, int hi)>;

  // The fused passes (cpu_fused.cpp): the bits of the composed defaults, in fewer passes over memory.
  void linear_forward(DType type, Operand x, Operand w, const float* bias, Output y, int rows, int in,
                      int out) override;
  void linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, Output f, Output g, int rows, int in,
                           int out) override;
  void add_round(Output y, const float* x, std::size_t n) override;
  void gelu_backward_round(const float* dy, Operand x, Output dx, std::size_t n) override;
  void round_to(Output x, std::size_t n) override;
  void pack(const float* x, Target packed, std::size_t n) override;
  void unpack(Operand packed, float* x, std::size_t n) override;
  void quantize(Operand x, Target codes, std::size_t n, Fp8CastStats* stats, float* scratch) override;

  void fill(float* x, std::size_t n, float value) override;
  void add(float* y, const float* x, std::size_t n) override;
  void scale(float* x, std::size_t n, float a) override;
  void fill_rows(float* y, const float* row, int rows, int cols) override;
  void bias_grad(Operand dy, float* dbias, int rows, int cols) override;
  void gelu_forward(const float* x, float* y, std::size_t n) override;
  void gelu_backward(const float* dy, Operand x, float* dx, std::size_t n) override;
  double sum_squares(const float* x, std::size_t n) override;
  float abs_max(Operand x, std::size_t n) override;
  TensorStats tensor_stats(const float* x, std::size_t n, float threshold) override;
  void tensor_stats_many(const float* x, const Span* spans, int count, float threshold, TensorStats* out) override;
  void tensor_stats_many_into(const float* x, const Span* spans, int count, float threshold,
                              TensorStats* result) override;
  void update_gate(const TensorStats* stats, const UpdateRule& rule, float* gate) override;
  void abs_max_into(Operand x, std::size_t n, float* result) override;
  void sum_squares_into(const float* x, std::size_t n, double* result) override;

  void layernorm_forward(const float* x, const float* gamma, const float* beta, Output y, float* mean,
                         float* rstd, int rows, int dim, float eps) override;
  void layernorm_backward(const float* dy, Operand x, const float* gamma, const float* mean,
                          const float* rstd, float* dx, float* dgamma, float* dbeta, int rows,
                          int dim) override;
  void batchnorm_forward_train(const float* x, const std::uint8_t* row_mask, const float* gamma,
                               const float* beta, float* y, float* mean, float* rstd, float* stat_sums,
                               int rows, int ch, float eps) override;
  void batchnorm_forward_eval(const float* x, const std::uint8_t* row_mask, const float* gamma,
                              const float* beta, const float* running_mean, const float* running_var,
                              float* y, int rows, int ch, float eps) override;
  void batchnorm_backward(const float* dy, const float* x, const std::uint8_t* row_mask,
                          const float* gamma, const float* mean, const float* rstd, float* dx,
                          float* dgamma, float* dbeta, int rows, int ch) override;

  void attention_forward(DType compute, Operand qkv, const std::uint8_t* key_mask, float* p, float* row_stats,
                         Output ctx, int B, int L, int H, int hd) override;
  void attention_backward(DType compute, Operand qkv, const AttentionProbs& probs, const float* dctx, Output dqkv,
                          int B, int L, int H, int hd) override;

  void frame_signal(const float* audio, const float* window, float* frames, int B, std::int64_t A,
                    int T, int win, int hop) override;
  void power_spectrum(const float* spec, float* power, int rows, int nb) override;
  void masked_log(float* x, const std::uint8_t* row_mask, int rows, int cols, float eps) override;
  void im2col_1d(const float* x, float* col, int B, int T, int C, int k, int stride, int pad,
                 int To) override;
  void col2im_1d(const float* dcol, float* dx, int B, int T, int C, int k, int stride, int pad,
                 int To) override;
  void video_patches(const std::uint8_t* video, float* patches, int B, int F, int H, int W, int C,
                     int tp, int p) override;

  void mask_rows(float* x, const std::uint8_t* row_mask, int rows, int dim) override;
  void gather_rows(const float* x, const std::int32_t* index, float* y, int rows, int cols) override;
  void scatter_rows(const float* x, const std::int32_t* index, float* y, int rows, int cols) override;
  void transpose_blocks(const void* x, void* y, int n0, int n1, std::size_t block_bytes) override;
  void embed_forward(const float* a, const float* v, const float* pos, const float* modality, float* x,
                     int B, int Ta, int L, int D) override;
  void embed_backward(const float* dx, float* da, float* dv, float* dpos, float* dmodality, int B,
                      int Ta, int L, int D) override;
  void masked_mean_pool_forward(const float* x, const std::uint8_t* mask, const float* counts, float* pooled, int B, int L,
                                int D, int begin, int end) override;
  void masked_mean_pool_backward(const float* dpooled, const std::uint8_t* mask, const float* counts, float* dx, int B,
                                 int L, int D, int begin, int end) override;
  void concat_columns(const float* a, const float* b, float* out, int B, int Da, int Db) override;
  void split_columns(const float* d, float* da, float* db, int B, int Da, int Db) override;

  double cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                       int classes, float grad_scale, int* correct) override;
  double binary_cross_entropy(const float* logits, const float* targets, float* dlogits, int rows, int classes,
                              float grad_scale) override;
  double info_nce(const float* a, const float* b, float* da, float* db, int B, int D, float tau,
                  float grad_scale) override;

  void adamw(Target w, const float* g, float* m, float* v, std::size_t n, float lr, float beta1, float beta2, float eps,
             float weight_decay, int step, WeightRounding rounding) override;

 private:
  // gemm, with before(lo, hi) and after(lo, hi) run on each band of rows (M >= N only).
  void gemm_in_bands(DType compute, Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda,
                     Operand B, int ldb, float beta, float* C, int ldc, const RowBandStep& before,
                     const RowBandStep& after);
  // x's n values in fp32: its own storage, or its 16-bit patterns widened into `scratch` (exact), or
  // its fp8 codes' values times 1 / its scale (unpack's).
  const float* widened(Operand x, std::size_t n, Buffer& scratch);
  // x's n values as an sgemm in `compute` takes them: widened(), and where x is fp32 in a 16-bit
  // product, rounded to nearest even into `scratch` (x itself is left as it is).
  const float* in_compute(Operand x, DType compute, std::size_t n, Buffer& scratch);
  // x[i] = the exact value of fp8 code i, times `factor` (1: the code's value alone; no scale read).
  void decode_fp8(Operand codes, float factor, float* x, std::size_t n);
  // The FP8 product (gemm with fp8 operands): the codes decoded exactly, multiplied in fp32.
  void gemm_fp8(Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda, Operand B, int ldb,
                float beta, float* C, int ldc, const RowBandStep& before, const RowBandStep& after);

  double gemm_flops_ = 0;
  Buffer operand_a_, operand_b_;     // operands widened (or fp32 ones rounded) to what sgemm reads
  Buffer operand_x_;                 // a 16-bit input of an elementwise or row op, widened
  Buffer16 packed_a_, packed_b_;     // fp32 operands narrowed to bf16 for oneDNN
};

}  // namespace avtrain
