#pragma once
// The CUDA backend: the kernel interface of backend/backend.hpp on one GPU. Matrix products go
// through cuBLAS (cublasGemmEx, fp32 accumulation; TF32 off unless allowed, so FP32 stays a true
// baseline); every other op is a kernel of this directory, one file per family as in cpu/. All
// pointers are device pointers. Ops run in order on the compute stream; the ops that return a value
// to the host (sums, maxima, losses) synchronise it.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/arena_memory.hpp"
#include "cublaslt_matmul.hpp"
#include "fp8_matmul.hpp"

namespace avtrain::cuda {

class CudnnAttention;  // cudnn_attention.hpp

// device.attention: which engine runs the fused path's attention (device.fused 1): cuDNN's SDPA where
// libcudnn loads and takes the shape, else the own flash kernel (automatic); cuDNN or an error (cudnn);
// the own flash kernel (own).
enum class FusedAttentionEngine { automatic, cudnn, own };

struct CudaOptions {
  int device = 0;
  bool allow_tf32 = false;  // fp32 products on TF32 tensor cores (--allow-tf32)
  bool fused = false;       // fused kernels where there are some (device.fused): attention on sm_80 and later
  FusedAttentionEngine attention = FusedAttentionEngine::automatic;
  int rank = 0;  // the process's world rank: rank 0 prints the backend's notes (a shape cuDNN refuses)
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  void set_threads(int) override {}
  double gemm_flops() const override { return gemm_flops_; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p) noexcept override;
  void upload(void* dst, const void* host_src, std::size_t bytes) override;
  void download(void* host_dst, const void* src, std::size_t bytes) override;
  void zero(void* p, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  bool host_accessible() const override { return false; }
  std::size_t peak_bytes() const override { return arena_ ? arena_->peak_bytes() : 0; }
  void synchronize() override;
  std::size_t memory_for_tensors() const override;
  // Page-locked staging and a copy stream (cuda_input_upload.hpp).
  std::unique_ptr<InputUpload> make_input_upload() override;

  // Takes one block of `bytes` of device memory now; from then on every allocation of this backend
  // (the tensors, its own scratch) comes from it, so nothing calls cudaMalloc inside the step loop,
  // and peak_bytes() is its high-water mark. `what` names the option that sets the size.
  void reserve_arena(std::size_t bytes, const std::string& what);
  // Device allocations made with cudaMalloc so far (the arena's block counts once).
  std::size_t device_allocations() const { return device_allocations_; }

  cudaStream_t stream() const { return stream_; }

  using Backend::gemm;
  void gemm(DType compute, Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda,
            Operand B, int ldb, float beta, float* C, int ldc) override;
  std::string gemm_engine(DType compute) const override;
  void round_to(Output x, std::size_t n) override;
  void pack(const float* x, Target packed, std::size_t n) override;
  void unpack(Operand packed, float* x, std::size_t n) override;
  // One pass (cuda_fp8.cu): x read once, its codes written and the cast's statistics folded in.
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
  void abs_max_into(Operand x, std::size_t n, float* result) override;
  void sum_squares_into(const float* x, std::size_t n, double* result) override;

  // Under device.fused on sm_80 and later, copy_only outputs in a 16-bit type take cuBLASLt's epilogues
  // (cublaslt_matmul.hpp): the 16-bit outputs written by the product with its bias, GELU from those;
  // dW and db from one product.
  void linear_forward(DType type, Operand x, Operand w, const float* bias, Output y, int rows, int in,
                      int out) override;
  void add_round(Output y, const float* x, std::size_t n) override;
  void gelu_round(const float* x, Output y, std::size_t n) override;
  void linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, Output f, Output g, int rows, int in,
                           int out) override;
  void gelu_backward_round(const float* dy, Operand x, Output dx, std::size_t n) override;
  void accumulate_rounded(DType type, float* acc, float* x, std::size_t n) override;
  void linear_param_grads(DType type, Operand dy, const float* dy_values, Operand x, float* dw, float* db,
                          float* dw_scratch, float* db_scratch, int rows, int in, int out) override;
  // FP8 products taken through cuBLASLt's FP8 matmul so far (cuda_fp8.cu).
  long long fp8_products() const { return fp8_ ? fp8_->products() : 0; }
  // Products taken through cuBLASLt so far (0 without device.fused), and why the last one it refused was.
  long long lt_products() const;
  std::string lt_refusal() const;

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
  // Fused, copy_only outputs in `compute` are written in place by the engines: cuDNN's O and dq/dk/dv,
  // the own kernel's epilogues (cuda_flash_attention.cu).
  void attention_backward(DType compute, Operand qkv, const AttentionProbs& probs, const float* dctx, Output dqkv,
                          int B, int L, int H, int hd) override;
  bool fuses_attention(DType compute, int head_dim) const override;
  std::string attention_engine(DType compute, int head_dim) const override;

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
  void adamw_tensors(float* w, float* g, float* m, float* v, const AdamWTensor* tensors, int count, float lr,
                     float beta1, float beta2, float eps, const float* gate, int step) override;
  void update_gate(const TensorStats* stats, const UpdateRule& rule, float* gate) override;

  // Device scratch of at least `bytes` for an op's temporaries (grows, from the arena once there is
  // one, never shrinks; not shared between ops in flight: every op that uses it is ordered on the
  // one stream).
  void* scratch(std::size_t bytes);
  // A pinned host buffer for results an op returns to the host (1 MiB from the start; grows past it
  // only for results that large).
  void* host_result(std::size_t bytes);
  cublasHandle_t cublas() const { return cublas_; }

 private:
  // The fused path of attention_forward and attention_backward: cuDNN where it
  // takes the shape, else the own kernel; the output in fp32 (ctx, dqkv) or, where that is null, as
  // 16-bit patterns in `compute` (ctx16, dqkv16).
  void fused_forward(DType compute, Operand qkv, const std::uint8_t* key_mask, float* row_stats, float* ctx,
                     std::uint16_t* ctx16, int B, int L, int H, int hd);
  void fused_backward(DType compute, Operand qkv, const AttentionProbs& probs, const float* dctx, float* dqkv,
                      std::uint16_t* dqkv16, int B, int L, int H, int hd);
  // Whether backward given `probs` runs fused: p recomputed, forward's output at hand in `compute`.
  bool fuses_backward(DType compute, const AttentionProbs& probs, int hd) const;
  // Fused attention (cuda_flash_attention.cu) on 16-bit q, k, v in qkv's layout; backward reads dctx
  // packed (dout) and writes each row's dot(dout, out) into `dot` [B, H, L] on its way. Outputs as above.
  void flash_forward(DType compute, const std::uint16_t* qkv, const std::uint8_t* key_mask, float* row_stats,
                     float* ctx, std::uint16_t* ctx16, int B, int L, int H, int hd);
  void flash_backward(DType compute, const std::uint16_t* qkv, const std::uint8_t* key_mask, const float* row_stats,
                      Operand out, const std::uint16_t* dout, float* dot, float* dqkv, std::uint16_t* dqkv16, int B,
                      int L, int H, int hd);
  // Fused attention on cuDNN's SDPA (cuda_cudnn_attention.cu): whether it runs this shape (its graphs
  // built on first ask; under device.attention cudnn a refusal throws), and the two directions, in
  // the backend's fp32 ctx, dctx, dqkv, or ctx16, dqkv16 written by cuDNN itself; row_stats (lse, 1).
  bool cudnn_takes(DType compute, int B, int L, int H, int hd);
  void cudnn_forward(DType compute, Operand qkv, const std::uint8_t* key_mask, float* row_stats, float* ctx,
                     std::uint16_t* ctx16, int B, int L, int H, int hd);
  void cudnn_backward(DType compute, Operand qkv, const std::uint8_t* key_mask, const float* row_stats, Operand out,
                      const float* dctx, float* dqkv, std::uint16_t* dqkv16, int B, int L, int H, int hd);

  // The many-tensor statistics' plan (`bytes` of host memory at `plan`: its chunks and each tensor's
  // first chunk) on the device, uploaded only when the spans differ from the last call's: a step's
  // statistics take the same spans every step, so their passes issue no copy from pageable memory
  // (which would wait for the stream) and the update can follow them on the device.
  const void* stats_plan_on_device(const Span* spans, int count, const void* plan, std::size_t bytes);

  // The FP8 side (cuda_fp8.cu): the quantizing pack and dequantizing unpack with the tensor's scale,
  // and the FP8 product through cuBLASLt (its operands brought to its layout first where they are not
  // in it), on sm_89 and later.
  void pack_fp8(const float* x, Target packed, std::size_t n);
  void unpack_fp8(Operand packed, float* x, std::size_t n);
  void gemm_fp8(Trans ta, Trans tb, int M, int N, int K, float alpha, Operand A, int lda, Operand B, int ldb,
                float beta, float* C, int ldc);
  // cuBLASLt's FP8 matmul with its workspace (from the arena), made on the first FP8 product.
  Fp8Matmul& fp8_matmul();

  // cuBLASLt with its workspace (taken from the arena on first use), where device.fused on sm_80+.
  LtMatmul* lt();
  // Whether copy_only outputs in `type` are written alone (cuBLASLt's epilogues, LayerNorm's 16-bit
  // pass): device.fused on sm_80 and later, a 16-bit type.
  bool writes_copies_alone(DType type) const;
  // After cuBLASLt refused a product: rank 0 says so, once per kind of product and shape.
  void say_lt_refusal();

  // cudaMalloc'd memory: the arena's block, or every tensor where no arena is reserved.
  class DeviceMemory final : public TensorMemory {
   public:
    explicit DeviceMemory(CudaBackend& backend) : backend_(backend) {}
    void* allocate(std::size_t bytes) override;
    void deallocate(void* p) noexcept override;
    void upload(void* dst, const void* src, std::size_t bytes) override { backend_.upload(dst, src, bytes); }
    void download(void* dst, const void* src, std::size_t bytes) override { backend_.download(dst, src, bytes); }
    void zero(void* p, std::size_t bytes) override { backend_.zero(p, bytes); }
    void copy(void* dst, const void* src, std::size_t bytes) override { backend_.copy(dst, src, bytes); }
    bool host_accessible() const override { return false; }

   private:
    CudaBackend& backend_;
  };

  CudaOptions options_;
  bool fused_attention_capable_ = false;  // the device has sm_80's tensor-core instructions
  std::size_t shared_optin_bytes_ = 0;    // shared memory a block may opt in to (the own flash kernels' bound)
  bool cudnn_at_hand() const { return cudnn_ != nullptr; }
  std::unique_ptr<CudnnAttention> cudnn_;  // where device.fused and device.attention want it and it opened
  std::string cudnn_problem_;              // why not, in one line
  std::set<std::string> cudnn_refusals_said_;
  DeviceMemory device_memory_{*this};
  std::unique_ptr<ArenaMemory> arena_;
  std::size_t device_allocations_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  void* host_result_ = nullptr;
  std::size_t host_result_bytes_ = 0;
  std::vector<std::size_t> stats_plan_spans_;  // the spans of the plan on the device (offset, size, ...)
  void* stats_plan_ = nullptr;
  std::size_t stats_plan_bytes_ = 0;
  double gemm_flops_ = 0;
  std::unique_ptr<LtMatmul> lt_;
  void* lt_workspace_ = nullptr;
  long long lt_refusals_seen_ = 0;
  std::set<std::string> lt_refusals_said_;
  int compute_capability_ = 0;  // 10 * major + minor
  std::unique_ptr<Fp8Matmul> fp8_;
  void* fp8_workspace_ = nullptr;
};

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options);

}  // namespace avtrain::cuda
