#pragma once
// The CUDA backend's InputUpload (backend/backend.hpp): the micro-batch's samples go through a
// page-locked host buffer (cudaHostAlloc) on a copy stream of their own. A copy waits, on the GPU,
// for the work enqueued on the compute stream before it (which may still read its destination) and
// runs beside the work enqueued after it; ready() makes the compute stream wait for its event.
#include <cuda_runtime.h>

#include <memory>

#include "backend/backend.hpp"

namespace avtrain::cuda {

std::unique_ptr<Backend::InputUpload> make_input_upload(cudaStream_t compute);

}  // namespace avtrain::cuda
