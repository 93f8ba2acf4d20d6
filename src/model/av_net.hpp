#pragma once
// AVNet: an ordered list of named layers, input -> blocks.0 .. blocks.N-1 -> head. The list is what
// a pipeline cut divides into stages; no layer knows where it runs.
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "model/layer.hpp"
#include "model/model_config.hpp"
#include "model/param_store.hpp"

namespace avtrain {

class AVNet {
 public:
  // Registers every parameter in `params`; call params.allocate(seed) afterwards.
  AVNet(Backend& be, ParamStore& params, const ModelConfig& m, const data::SetInfo& s);
  std::vector<std::unique_ptr<Layer>>& layers() { return layers_; }
  // The parameters layer i registered: ids [first, second). A stage owns the union of its layers'.
  std::pair<ParamId, ParamId> param_range(std::size_t i) const { return param_ranges_[i]; }
  const TokenGeometry& geometry() const { return geometry_; }
  std::vector<std::unique_ptr<LayerState>> make_states() const;

  // Forward through all layers (the head leaves the loss and, in train mode, its gradient in the
  // flow); backward through them in reverse.
  void forward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states);
  void backward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states);

 private:
  TokenGeometry geometry_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::pair<ParamId, ParamId>> param_ranges_;
};

}  // namespace avtrain
