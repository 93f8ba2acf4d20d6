// The cuDNN attention engine where the build had no cuDNN or cudnn-frontend headers (CMake:
// AVTRAIN_CUDNN_DEPS; jobscripts/fetch-cudnn-headers.sh): open() says so, and the fused path runs
// the own flash kernel.
#include "cudnn_attention.hpp"

namespace avtrain::cuda {

std::string SdpaShape::name() const {
  return "B " + std::to_string(B) + " L " + std::to_string(L) + " H " + std::to_string(H) + " hd " + std::to_string(hd) +
         " " + dtype_name(type);
}

std::string CudnnAttention::validate(const SdpaShape&, int) {
  return "this build has no cuDNN attention engine (compiled without cuDNN's headers)";
}

std::unique_ptr<CudnnAttention> CudnnAttention::open(cudaStream_t, std::string& why) {
  why = "this build has no cuDNN attention engine (compiled without cuDNN's headers: jobscripts/fetch-cudnn-headers.sh)";
  return nullptr;
}

}  // namespace avtrain::cuda
