#include "app/backend_choice.hpp"

#include "core/error.hpp"
#include "parallel/staged_communicator.hpp"
#ifdef AVTRAIN_HAVE_CUDA
#include "cuda_backend.hpp"
#include "device_binding.hpp"
#include "device_query.hpp"
#include "nccl_communicator.hpp"
#include "pinned_staging.hpp"
#endif

namespace avtrain {

bool uses_nccl(const RunConfig& c) {
  return c.device.comm == DeviceComm::nccl ||
         (c.device.comm == DeviceComm::automatic && c.device.backend == DeviceBackend::cuda);
}

std::unique_ptr<Backend> make_backend(const RunConfig& c, const parallel::Topology& topology) {
  if (c.device.backend == DeviceBackend::cpu) {
    require(!uses_nccl(c), "--comm nccl needs --device cuda: NCCL moves device memory");
    require(!c.device.allow_tf32, "--allow-tf32 applies to --device cuda only");
    require(!c.device.fused, "--device.fused applies to --device cuda only");
    require(c.device.attention == AttentionEngine::automatic, "--device.attention applies to --device cuda only");
    auto backend = make_cpu_backend();
    backend->set_threads(c.train.threads);
    return backend;
  }
  require(!c.debug.stage_comm, "--debug.stage_comm applies to --device cpu: on cuda, --comm mpi stages through host memory");
#ifdef AVTRAIN_HAVE_CUDA
  const int device = cuda::bind_device(topology, uses_nccl(c));
  // FP8 products need sm_89 or later: said at the start, in one line, not at the first product.
  if (c.precision.mode == PrecisionMode::fp8)
    if (const std::string refusal = cuda::fp8_refusal(device); !refusal.empty()) throw Error(refusal);
  require(c.device.fused || c.device.attention == AttentionEngine::automatic,
          "--device.attention " + std::string(enum_name(c.device.attention)) + " applies to --device.fused 1 only");
  const auto attention = c.device.attention == AttentionEngine::cudnn ? cuda::FusedAttentionEngine::cudnn
                         : c.device.attention == AttentionEngine::own ? cuda::FusedAttentionEngine::own
                                                                      : cuda::FusedAttentionEngine::automatic;
  return cuda::make_cuda_backend({device, c.device.allow_tf32, c.device.fused, attention, topology.rank});
#else
  (void)topology;
  throw Error("--device cuda: this build has no CUDA backend (nvcc was not found when it was configured); "
              "build the cuda preset: cmake --preset cuda && cmake --build --preset cuda");
#endif
}

void reserve_device_memory(const RunConfig& c, const parallel::Topology& topology, Backend& backend) {
  if (backend.host_accessible()) return;
#ifdef AVTRAIN_HAVE_CUDA
  std::size_t bytes = std::size_t(c.device.arena_mb * 1024 * 1024);
  // Ranks that share a GPU start together: each takes an equal share of the whole, not of what is
  // free when it happens to ask, and leaves a fifth of it for its context, cuBLAS and the rest.
  const int sharing = cuda::ranks_sharing_device(topology);
  if (bytes == 0) bytes = sharing == 1 ? cuda::free_memory() / 10 * 9 : cuda::total_memory() / std::size_t(sharing) / 10 * 8;
  static_cast<cuda::CudaBackend&>(backend).reserve_arena(bytes, "device.arena_mb");
#else
  (void)c;
  (void)topology;
#endif
}

std::string use_device_collectives(const RunConfig& c, parallel::ProcessGroups& groups, Backend& backend) {
  if (backend.host_accessible()) {
    if (!c.debug.stage_comm) return "";
    parallel::stage_through_host(groups, [](const std::string&) { return parallel::make_late_host_staging(); });
    return "MPI, staged through host copies made late (--debug.stage_comm)";
  }
#ifdef AVTRAIN_HAVE_CUDA
  const cudaStream_t compute = static_cast<cuda::CudaBackend&>(backend).stream();
  if (uses_nccl(c)) {
    cuda::make_nccl_groups(groups, compute);
    return "NCCL";
  }
  parallel::stage_through_host(groups, [compute](const std::string& group) { return cuda::make_pinned_staging(compute, group); });
  const int sharing = cuda::ranks_sharing_device(groups.topology);
  return "MPI, staged through pinned host memory (" + std::to_string(sharing) + " rank" + (sharing == 1 ? "" : "s") +
         " on rank 0's GPU)";
#else
  (void)groups;
  return "";
#endif
}

}  // namespace avtrain
