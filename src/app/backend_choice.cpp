#include "app/backend_choice.hpp"

#include "core/error.hpp"
#ifdef AVTRAIN_HAVE_CUDA
#include "cuda_backend.hpp"
#include "device_binding.hpp"
#include "device_query.hpp"
#include "nccl_communicator.hpp"
#endif

namespace avtrain {

bool uses_nccl(const RunConfig& c) {
  return c.device.comm == "nccl" || (c.device.comm == "auto" && c.device.backend == "cuda");
}

std::unique_ptr<Backend> make_backend(const RunConfig& c, const parallel::Topology& topology) {
  if (c.device.backend == "cpu") {
    require(!uses_nccl(c), "--comm nccl needs --device cuda: NCCL moves device memory");
    require(!c.device.allow_tf32, "--allow-tf32 applies to --device cuda only");
    auto backend = make_cpu_backend();
    backend->set_threads(c.train.threads);
    return backend;
  }
#ifdef AVTRAIN_HAVE_CUDA
  const int device = cuda::bind_device(topology, uses_nccl(c));
  return cuda::make_cuda_backend({device, c.device.allow_tf32});
#else
  (void)topology;
  throw Error("--device cuda: this build has no CUDA backend (nvcc was not found when it was configured); "
              "build the cuda preset: cmake --preset cuda && cmake --build --preset cuda");
#endif
}

void reserve_device_memory(const RunConfig& c, Backend& backend) {
  if (backend.host_accessible()) return;
#ifdef AVTRAIN_HAVE_CUDA
  std::size_t bytes = std::size_t(c.device.arena_mb * 1024 * 1024);
  if (bytes == 0) bytes = cuda::free_memory() / 10 * 9;
  static_cast<cuda::CudaBackend&>(backend).reserve_arena(bytes, "device.arena_mb");
#else
  (void)c;
#endif
}

void use_device_collectives(const RunConfig& c, parallel::ProcessGroups& groups, Backend& backend) {
  if (!uses_nccl(c)) {
    require(backend.host_accessible() || groups.topology.world == 1,
            "--device cuda --comm mpi: MPI moves host memory here, the gradients live on the GPU; use --comm nccl");
    return;
  }
#ifdef AVTRAIN_HAVE_CUDA
  cuda::make_nccl_groups(groups, static_cast<cuda::CudaBackend&>(backend).stream());
#else
  (void)groups;
  (void)backend;
#endif
}

}  // namespace avtrain
