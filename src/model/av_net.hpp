#pragma once
// AVNet: an ordered list of named layers, input -> blocks.0 .. blocks.N-1 -> head. The list is what
// a pipeline cut divides into stages; no layer knows where it runs.
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "model/layer.hpp"
#include "model/model_config.hpp"
#include "model/param_store.hpp"
#include "precision/precision_policy.hpp"

namespace avtrain {

class AVNet {
 public:
  // Registers every parameter in `params`; call params.allocate(seed) and params.refresh_working()
  // afterwards. Each module computes in the type `policy` gives it; a pattern of
  // precision.fp32_layers that names no module is an error.
  AVNet(Backend& be, ParamStore& params, const ModelConfig& m, const data::SetInfo& s,
        const PrecisionPolicy& policy = PrecisionPolicy());
  std::vector<std::unique_ptr<Layer>>& layers() { return layers_; }
  // The parameters layer i registered: ids [first, second). A stage owns the union of its layers'.
  std::pair<ParamId, ParamId> param_range(std::size_t i) const { return param_ranges_[i]; }
  const TokenGeometry& geometry() const { return geometry_; }
  std::vector<std::unique_ptr<LayerState>> make_states() const;
  // fp32 scratch shared by all layers (not per micro-batch).
  const Workspace& workspace() const { return workspace_; }

  // Forward through all layers (the head leaves the loss and, in train mode, its gradient in the
  // flow); backward through them in reverse.
  void forward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states);
  void backward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states);

 private:
  TokenGeometry geometry_;
  Workspace workspace_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::pair<ParamId, ParamId>> param_ranges_;
};

}  // namespace avtrain
