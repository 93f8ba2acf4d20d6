#include "pinned_staging.hpp"

#include <deque>
#include <vector>

#include "core/error.hpp"
#include "cuda_check.hpp"

namespace avtrain::cuda {
namespace {

class PinnedStaging final : public parallel::DeviceStaging {
 public:
  PinnedStaging(cudaStream_t compute, const std::string& group)
      : compute_(compute), where_(" (host staging of the '" + group + "' group)") {
    ok(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", __LINE__);
    ok(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming), "cudaEventCreateWithFlags", __LINE__);
  }
  ~PinnedStaging() override {
    cudaStreamSynchronize(copies_);  // never throws: the last word of a run that may be failing
    for (cudaEvent_t e : in_flight_) cudaEventDestroy(e);
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
    cudaEventDestroy(computed_);
    cudaStreamDestroy(copies_);
  }
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  void* allocate_host(std::size_t bytes) override {
    void* host = nullptr;
    ok(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc", __LINE__);
    return host;
  }
  void free_host(void* host) noexcept override { cudaFreeHost(host); }

  Ticket to_host(void* host, const void* device, std::size_t bytes) override {
    return enqueue(host, device, bytes);
  }
  Ticket to_device(void* device, const void* host, std::size_t bytes) override {
    return enqueue(device, host, bytes);
  }

  bool done(Ticket t) override {
    while (completed_ < t && !in_flight_.empty()) {
      const cudaError_t status = cudaEventQuery(in_flight_.front());
      if (status == cudaErrorNotReady) return false;
      ok(status, "cudaEventQuery", __LINE__);
      spare_.push_back(in_flight_.front());
      in_flight_.pop_front();
      ++completed_;
    }
    return completed_ >= t;
  }

  void wait(Ticket t) override {
    if (t <= completed_) return;
    require(t <= issued_, "internal: a staging copy was waited for that was never enqueued" + where_);
    // A copy has no peer to wait for: blocking on its event cannot hang on another rank.
    ok(cudaEventSynchronize(in_flight_[std::size_t(t - completed_ - 1)]), "cudaEventSynchronize", __LINE__);
    done(t);
  }

  Ticket last() const override { return issued_; }

 private:
  // cudaMemcpyDefault: the direction from the pointers (unified addressing), so the tests can stage
  // host memory through the same code.
  Ticket enqueue(void* to, const void* from, std::size_t bytes) {
    ok(cudaEventRecord(computed_, compute_), "cudaEventRecord", __LINE__);
    ok(cudaStreamWaitEvent(copies_, computed_, 0), "cudaStreamWaitEvent", __LINE__);
    ok(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, copies_), "cudaMemcpyAsync", __LINE__);
    cudaEvent_t event = nullptr;
    if (spare_.empty()) {
      ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags", __LINE__);
    } else {
      event = spare_.back();
      spare_.pop_back();
    }
    in_flight_.push_back(event);
    ok(cudaEventRecord(event, copies_), "cudaEventRecord", __LINE__);
    return ++issued_;
  }

  void ok(cudaError_t status, const char* call, int line) {
    if (status == cudaSuccess) return;
    fail("CUDA", call, std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")" + where_,
         __FILE__, line);
  }

  cudaStream_t compute_;
  cudaStream_t copies_ = nullptr;
  cudaEvent_t computed_ = nullptr;            // recorded on compute_ before each copy
  std::deque<cudaEvent_t> in_flight_;         // the copies completed_ + 1 .. issued_, in order
  std::vector<cudaEvent_t> spare_;            // events for reuse
  Ticket issued_ = 0, completed_ = 0;
  std::string where_;
};

}  // namespace

std::unique_ptr<parallel::DeviceStaging> make_pinned_staging(cudaStream_t compute, const std::string& group) {
  return std::make_unique<PinnedStaging>(compute, group);
}

}  // namespace avtrain::cuda
