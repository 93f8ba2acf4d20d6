// The CPU's DeviceStaging: host memory on both sides, every copy made late (device_staging.hpp).
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>

#include "core/error.hpp"
#include "parallel/device_staging.hpp"

namespace avtrain::parallel {
namespace {

class LateHostStaging final : public DeviceStaging {
 public:
  void* allocate_host(std::size_t bytes) override { return ::operator new(bytes); }
  void free_host(void* host) noexcept override { ::operator delete(host); }
  Ticket to_host(void* host, const void* device, std::size_t bytes) override { return enqueue(host, device, bytes); }
  Ticket to_device(void* device, const void* host, std::size_t bytes) override { return enqueue(device, host, bytes); }
  // A copy completes on every 8th poll, as a GPU's may still run when first asked (and again): a
  // path that polls a few times and then blocks is caught (it hangs) rather than passed.
  static constexpr std::uint64_t kPolls = 8;
  bool done(Ticket t) override {
    if (completed_ < t && (++polls_ % kPolls == 0)) make_one();
    return completed_ >= t;
  }
  void wait(Ticket t) override {
    while (completed_ < t) make_one();
  }
  Ticket last() const override { return issued_; }

 private:
  struct Copy {
    void* to;
    const void* from;
    std::size_t bytes;
  };
  Ticket enqueue(void* to, const void* from, std::size_t bytes) {
    copies_.push_back({to, from, bytes});
    return ++issued_;
  }
  void make_one() {
    require(!copies_.empty(), "internal: a late host copy was waited for that was never enqueued");
    const Copy c = copies_.front();
    copies_.pop_front();
    std::memcpy(c.to, c.from, c.bytes);
    ++completed_;
  }
  std::deque<Copy> copies_;
  Ticket issued_ = 0, completed_ = 0;
  std::uint64_t polls_ = 0;
};

}  // namespace

std::unique_ptr<DeviceStaging> make_late_host_staging() { return std::make_unique<LateHostStaging>(); }

}  // namespace avtrain::parallel
