#include "backend/backend.hpp"

namespace avtrain {

namespace {
// Tensor memory the host reads and writes (the CPU's): the copy is done when start() returns.
class CopyAtOnce final : public Backend::InputUpload {
 public:
  explicit CopyAtOnce(Backend& be) : be_(be) {}
  void start(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) be_.upload(dst, src, bytes);
  }
  void ready() override {}

 private:
  Backend& be_;
};
}  // namespace

std::unique_ptr<Backend::InputUpload> Backend::make_input_upload() { return std::make_unique<CopyAtOnce>(*this); }

}  // namespace avtrain
