#pragma once
// Every CUDA, cuBLAS and NCCL call is checked: a failure throws avtrain::Error naming the call, the
// file and line, the rank (set once by the program with set_error_rank) and the library's message.
#include <string>

namespace avtrain::cuda {

// The world rank put into messages; -1 (the default) leaves it out.
void set_error_rank(int rank);
[[noreturn]] void fail(const char* library, const char* call, const std::string& message, const char* file, int line);

void check_cuda(int status, const char* call, const char* file, int line);     // cudaError_t
void check_cublas(int status, const char* call, const char* file, int line);   // cublasStatus_t
void check_nccl(int status, const char* call, const char* file, int line);     // ncclResult_t

}  // namespace avtrain::cuda

#define CUDA_CHECK(call) ::avtrain::cuda::check_cuda(static_cast<int>(call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::avtrain::cuda::check_cublas(static_cast<int>(call), #call, __FILE__, __LINE__)
#define NCCL_CHECK(call) ::avtrain::cuda::check_nccl(static_cast<int>(call), #call, __FILE__, __LINE__)
// After a kernel launch: the launch's own error (bad configuration), without synchronising.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
