// cuDNN's SDPA through cudnn-frontend's graph API, loaded at run time
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: every cuDNN call goes through cudnn_dlhandle, set here from
// cudnn_library()). One forward graph (training mode: O and Stats) and one backward graph
// (deterministic: cuDNN's dQ in a fixed order, so a run repeats bit for bit) per shape, built on
// first use and kept for the process.
#include "cudnn_attention.hpp"

#include <cudnn_frontend.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "core/error.hpp"
#include "cuda_check.hpp"
#include "cudnn_library.hpp"

// The frontend's handle on libcudnn (declared extern in cudnn_frontend_shim.h; defined by its user).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace avtrain::cuda {

namespace fe = cudnn_frontend;

namespace {

// The graphs' tensor ids.
enum Uid : std::int64_t { kQ = 1, kK, kV, kBias, kO, kStats, kDout, kDq, kDk, kDv };

// A frontend error as the project's one line: the library, the call, the message.
#define CUDNN_FE_CHECK(call)                                                                           \
  do {                                                                                                 \
    fe::error_t status_ = (call);                                                                      \
    if (status_.is_bad()) ::avtrain::cuda::fail("cuDNN", #call, status_.get_message(), __FILE__, __LINE__); \
  } while (0)

struct ShapeKey {
  int B, L, H, hd, type;
  bool operator<(const ShapeKey& o) const {
    return std::tie(B, L, H, hd, type) < std::tie(o.B, o.L, o.H, o.hd, o.type);
  }
};
ShapeKey key_of(const SdpaShape& s) { return {s.B, s.L, s.H, s.hd, int(s.type)}; }

// The built graphs of one shape, or why cuDNN does not take it.
struct Graphs {
  bool ok = false;
  std::string why;
  int bias_rows = 1;
  std::shared_ptr<fe::graph::Graph> forward, backward;
  std::int64_t forward_workspace = 0, backward_workspace = 0;
};

class FrontendAttention final : public CudnnAttention {
 public:
  // validate_only_sm: no handle, no device; the graphs only checked by the frontend's validate()
  // for that sm version (CudnnAttention::validate).
  FrontendAttention(cudnnHandle_t handle, std::string description, int validate_only_sm = 0)
      : handle_(handle), description_(std::move(description)), validate_only_sm_(validate_only_sm) {}
  ~FrontendAttention() override {
    graphs_.clear();
    if (handle_) fe::detail::destroy_handle(handle_);
  }

  std::string description() const override { return description_; }

  bool prepare(const SdpaShape& s, std::string& why) override {
    Graphs& g = graphs(s);
    why = g.why;
    return g.ok;
  }
  int bias_rows(const SdpaShape& s) const override { return built(s).bias_rows; }
  std::size_t forward_workspace(const SdpaShape& s) const override { return std::size_t(built(s).forward_workspace); }
  std::size_t backward_workspace(const SdpaShape& s) const override { return std::size_t(built(s).backward_workspace); }

  void forward(const SdpaShape& s, const void* qkv, const void* bias, void* o, float* lse, void* workspace) override {
    const Graphs& g = built(s);
    const std::size_t D = std::size_t(s.H) * s.hd;
    std::unordered_map<std::int64_t, void*> pack{{kQ, at(qkv, 0)},  {kK, at(qkv, D)}, {kV, at(qkv, 2 * D)},
                                                 {kBias, const_cast<void*>(bias)}, {kO, o}, {kStats, lse}};
    CUDNN_FE_CHECK(g.forward->execute(handle_, pack, workspace));
  }

  void backward(const SdpaShape& s, const void* qkv, const void* bias, const void* o, const void* dout, const float* lse,
                void* dqkv, void* workspace) override {
    const Graphs& g = built(s);
    const std::size_t D = std::size_t(s.H) * s.hd;
    std::unordered_map<std::int64_t, void*> pack{
        {kQ, at(qkv, 0)},         {kK, at(qkv, D)},
        {kV, at(qkv, 2 * D)},     {kBias, const_cast<void*>(bias)},
        {kO, const_cast<void*>(o)}, {kDout, const_cast<void*>(dout)},
        {kStats, const_cast<float*>(lse)}, {kDq, at(dqkv, 0)},
        {kDk, at(dqkv, D)},       {kDv, at(dqkv, 2 * D)}};
    CUDNN_FE_CHECK(g.backward->execute(handle_, pack, workspace));
  }

 private:
  // Element `offset` of a 16-bit array.
  static void* at(const void* base, std::size_t offset) {
    return const_cast<char*>(static_cast<const char*>(base) + offset * 2);
  }

  const Graphs& built(const SdpaShape& s) const {
    const auto it = graphs_.find(key_of(s));
    if (it == graphs_.end() || !it->second.ok)
      throw Error("internal: cuDNN attention used at a shape it was not prepared for (" + s.name() + ")");
    return it->second;
  }

  Graphs& graphs(const SdpaShape& s) {
    const auto [it, made] = graphs_.try_emplace(key_of(s));
    if (!made) return it->second;
    Graphs& g = it->second;
    // The bias broadcast over queries first ([B, 1, 1, L]); else materialised ([B, 1, L, L]).
    std::string why_broadcast;
    for (const int rows : {1, s.L}) {
      g.bias_rows = rows;
      try {
        g.why.clear();
        g.ok = build_forward(s, g) && build_backward(s, g);
      } catch (const std::exception& e) {  // the frontend throws where a symbol or library is missing
        g.ok = false;
        g.why = e.what();
      }
      if (g.ok) return g;
      if (rows == 1) why_broadcast = g.why;
      if (s.L == 1) break;
    }
    g.why = "bias [B,1,1,L]: " + why_broadcast + (s.L > 1 ? "; bias [B,1,L,L]: " + g.why : "");
    g.forward.reset();
    g.backward.reset();
    return g;
  }

  // Runs a frontend step; false with g.why = "STEP: message" where it fails.
  static bool step(Graphs& g, const char* what, fe::error_t status) {
    if (status.is_good()) return true;
    g.why = std::string(what) + ": " + status.get_message();
    return false;
  }

  static fe::DataType_t io_type(const SdpaShape& s) {
    return s.type == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
  }

  std::shared_ptr<fe::graph::Graph> new_graph(const SdpaShape& s) const {
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(io_type(s))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    if (validate_only_sm_) graph->set_sm_version(validate_only_sm_);
    return graph;
  }

  // q, k, v (and dq, dk, dv) of qkv [B, L, 3, H, hd] as [B, H, L, hd].
  static std::vector<std::int64_t> qkv_strides(const SdpaShape& s) {
    const std::int64_t D = std::int64_t(s.H) * s.hd;
    return {std::int64_t(s.L) * 3 * D, s.hd, 3 * D, 1};
  }
  // O and dO of ctx [B, L, H * hd] as [B, H, L, hd].
  static std::vector<std::int64_t> ctx_strides(const SdpaShape& s) {
    const std::int64_t D = std::int64_t(s.H) * s.hd;
    return {std::int64_t(s.L) * D, s.hd, D, 1};
  }
  static std::vector<std::int64_t> dims(const SdpaShape& s) { return {s.B, s.H, s.L, s.hd}; }

  static std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& graph, const char* name, Uid uid,
                                                            std::vector<std::int64_t> dim,
                                                            std::vector<std::int64_t> stride) {
    return graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
  }
  static std::shared_ptr<fe::graph::Tensor_attributes> bias(fe::graph::Graph& graph, const SdpaShape& s, int rows) {
    const std::int64_t L = s.L;
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name("bias")
                            .set_uid(kBias)
                            .set_data_type(io_type(s))
                            .set_dim({s.B, 1, rows, L})
                            .set_stride({rows * L, rows * L, L, 1}));
  }
  static std::shared_ptr<fe::graph::Tensor_attributes> stats(const SdpaShape& s,
                                                            std::shared_ptr<fe::graph::Tensor_attributes> t) {
    t->set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({s.B, s.H, s.L, 1}).set_stride(
        {std::int64_t(s.H) * s.L, s.L, 1, 1});
    return t;
  }

  bool finish(Graphs& g, fe::graph::Graph& graph, std::int64_t& workspace) {
    if (validate_only_sm_) return step(g, "validate", graph.validate());
    return step(g, "validate", graph.validate()) && step(g, "build_operation_graph", graph.build_operation_graph(handle_)) &&
           step(g, "create_execution_plans", graph.create_execution_plans({fe::HeurMode_t::A})) &&
           step(g, "check_support", graph.check_support(handle_)) && step(g, "build_plans", graph.build_plans(handle_)) &&
           step(g, "get_workspace_size", graph.get_workspace_size(workspace));
  }

  bool build_forward(const SdpaShape& s, Graphs& g) {
    auto graph = new_graph(s);
    auto q = input(*graph, "Q", kQ, dims(s), qkv_strides(s));
    auto k = input(*graph, "K", kK, dims(s), qkv_strides(s));
    auto v = input(*graph, "V", kV, dims(s), qkv_strides(s));
    auto options = fe::graph::SDPA_attributes()
                       .set_name("sdpa")
                       .set_generate_stats(true)
                       .set_attn_scale(1.0f / std::sqrt(float(s.hd)))
                       .set_bias(bias(*graph, s, g.bias_rows));
    auto [o, lse] = graph->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim(dims(s)).set_stride(ctx_strides(s));
    stats(s, lse)->set_output(true);
    if (!finish(g, *graph, g.forward_workspace)) {
      g.why = "forward " + g.why;
      return false;
    }
    g.forward = graph;
    return true;
  }

  bool build_backward(const SdpaShape& s, Graphs& g) {
    auto graph = new_graph(s);
    auto q = input(*graph, "Q", kQ, dims(s), qkv_strides(s));
    auto k = input(*graph, "K", kK, dims(s), qkv_strides(s));
    auto v = input(*graph, "V", kV, dims(s), qkv_strides(s));
    auto o = input(*graph, "O", kO, dims(s), ctx_strides(s));
    auto dout = input(*graph, "dO", kDout, dims(s), ctx_strides(s));
    auto lse = stats(s, graph->tensor(fe::graph::Tensor_attributes().set_name("Stats")));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("sdpa_backward")
                       .set_attn_scale(1.0f / std::sqrt(float(s.hd)))
                       .set_bias(bias(*graph, s, g.bias_rows))
                       .set_deterministic_algorithm(true);
    auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, lse, options);
    dq->set_output(true).set_uid(kDq).set_dim(dims(s)).set_stride(qkv_strides(s));
    dk->set_output(true).set_uid(kDk).set_dim(dims(s)).set_stride(qkv_strides(s));
    dv->set_output(true).set_uid(kDv).set_dim(dims(s)).set_stride(qkv_strides(s));
    if (!finish(g, *graph, g.backward_workspace)) {
      g.why = "backward " + g.why;
      return false;
    }
    g.backward = graph;
    return true;
  }

  cudnnHandle_t handle_;
  std::string description_;
  int validate_only_sm_ = 0;
  std::map<ShapeKey, Graphs> graphs_;
};

}  // namespace

std::string SdpaShape::name() const {
  return "B " + std::to_string(B) + " L " + std::to_string(L) + " H " + std::to_string(H) + " hd " + std::to_string(hd) +
         " " + dtype_name(type);
}

std::string CudnnAttention::validate(const SdpaShape& s, int sm_version) {
  const CudnnLibrary& lib = cudnn_library();
  if (!lib.handle) return lib.problem;
  fe::cudnn_dlhandle = lib.handle;
  FrontendAttention frontend(nullptr, "validate", sm_version);
  std::string why;
  if (!frontend.prepare(s, why)) return why;
  return frontend.bias_rows(s) == 1 ? "" : "only with the bias [B,1,L,L]";
}

std::unique_ptr<CudnnAttention> CudnnAttention::open(cudaStream_t stream, std::string& why) {
  const CudnnLibrary& lib = cudnn_library();
  if (!lib.handle) {
    why = lib.problem;
    return nullptr;
  }
  fe::cudnn_dlhandle = lib.handle;
  // The frontend opens the CUDA runtime by name too: the one this program runs on, not another major
  // version a node may also carry.
  const std::string cudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart.c_str(), 0);
  cudnnHandle_t handle = nullptr;
  try {
    if (const auto status = fe::detail::create_handle(&handle); status != CUDNN_STATUS_SUCCESS) {
      why = "cudnnCreate failed (status " + std::to_string(int(status)) + ") with " + lib.path;
      return nullptr;
    }
    if (const auto status = fe::detail::set_stream(handle, stream); status != CUDNN_STATUS_SUCCESS) {
      fe::detail::destroy_handle(handle);
      why = "cudnnSetStream failed (status " + std::to_string(int(status)) + ") with " + lib.path;
      return nullptr;
    }
  } catch (const std::exception& e) {
    why = std::string(e.what()) + " (" + lib.path + ")";
    return nullptr;
  }
  return std::make_unique<FrontendAttention>(handle, "cuDNN " + cudnn_version_name(lib.version) + " SDPA (" + lib.path + ")");
}

}  // namespace avtrain::cuda
