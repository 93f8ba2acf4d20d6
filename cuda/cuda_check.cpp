#include "cuda_check.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <string_view>

#include "core/error.hpp"

namespace avtrain::cuda {

namespace {
std::atomic<int> error_rank{-1};

// __FILE__ is absolute under CMake: shown relative to the source root, found from this file's own path.
std::string_view source_relative(std::string_view file) {
  constexpr std::string_view self = __FILE__, tail = "cuda/cuda_check.cpp";
  if (!self.ends_with(tail)) return file;
  const std::string_view root = self.substr(0, self.size() - tail.size());
  return !root.empty() && file.starts_with(root) ? file.substr(root.size()) : file;
}
}  // namespace

void set_error_rank(int rank) { error_rank.store(rank); }

void fail(const char* library, const char* call, const std::string& message, const char* file, int line) {
  std::string what = std::string(library) + " error in " + call + " at " + std::string(source_relative(file)) + ":" +
                     std::to_string(line);
  if (const int rank = error_rank.load(); rank >= 0) what += " (rank " + std::to_string(rank) + ")";
  throw Error(what + ": " + message);
}

void check_cuda(int status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  const auto error = static_cast<cudaError_t>(status);
  fail("CUDA", call, std::string(cudaGetErrorName(error)) + " (" + cudaGetErrorString(error) + ")", file, line);
}

void check_cublas(int status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const auto error = static_cast<cublasStatus_t>(status);
  fail("cuBLAS", call, std::string(cublasGetStatusName(error)) + " (" + cublasGetStatusString(error) + ")", file,
       line);
}

void check_nccl(int status, const char* call, const char* file, int line) {
  if (status == ncclSuccess) return;
  std::string message = std::string(ncclGetErrorString(static_cast<ncclResult_t>(status))) + " (ncclResult " +
                        std::to_string(status) + ")";
  // NCCL's detail (which peer, which system call) is only in its last-error text, possibly from an earlier call.
  if (const char* detail = ncclGetLastError(nullptr); detail && *detail) message += "; last NCCL message: " + std::string(detail);
  fail("NCCL", call, message, file, line);
}

}  // namespace avtrain::cuda
