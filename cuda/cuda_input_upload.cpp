#include "cuda_input_upload.hpp"

#include <cstring>

#include "cuda_check.hpp"

namespace avtrain::cuda {
namespace {

class PinnedInputUpload final : public Backend::InputUpload {
 public:
  explicit PinnedInputUpload(cudaStream_t compute) : compute_(compute) {
    try {
      CUDA_CHECK(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreateWithFlags(&issued_before_, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    } catch (...) {
      release();
      throw;
    }
  }
  ~PinnedInputUpload() override {
    if (copies_) cudaStreamSynchronize(copies_);  // never throws: the last word of a run that may be failing
    release();
  }
  PinnedInputUpload(const PinnedInputUpload&) = delete;
  PinnedInputUpload& operator=(const PinnedInputUpload&) = delete;

  void start(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    // The host buffer is free again once the copy out of it is done (at once when none was made).
    CUDA_CHECK(cudaEventSynchronize(copied_));
    if (bytes > capacity_) {
      if (host_) CUDA_CHECK(cudaFreeHost(host_));
      host_ = nullptr;
      capacity_ = 0;
      CUDA_CHECK(cudaHostAlloc(&host_, bytes, cudaHostAllocDefault));
      capacity_ = bytes;
    }
    std::memcpy(host_, src, bytes);
    CUDA_CHECK(cudaEventRecord(issued_before_, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(copies_, issued_before_, 0));
    CUDA_CHECK(cudaMemcpyAsync(dst, host_, bytes, cudaMemcpyHostToDevice, copies_));
    CUDA_CHECK(cudaEventRecord(copied_, copies_));
  }

  void ready() override { CUDA_CHECK(cudaStreamWaitEvent(compute_, copied_, 0)); }

 private:
  void release() noexcept {
    if (host_) cudaFreeHost(host_);
    if (copied_) cudaEventDestroy(copied_);
    if (issued_before_) cudaEventDestroy(issued_before_);
    if (copies_) cudaStreamDestroy(copies_);
    host_ = nullptr;
    copied_ = issued_before_ = nullptr;
    copies_ = nullptr;
  }

  cudaStream_t compute_;
  cudaStream_t copies_ = nullptr;
  cudaEvent_t issued_before_ = nullptr;  // recorded on compute_ before each copy
  cudaEvent_t copied_ = nullptr;         // recorded on copies_ after each copy
  void* host_ = nullptr;                 // page-locked
  std::size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Backend::InputUpload> make_input_upload(cudaStream_t compute) {
  return std::make_unique<PinnedInputUpload>(compute);
}

}  // namespace avtrain::cuda
