#pragma once
// AVNet: an ordered list of named layers, input -> blocks.0 .. blocks.N-1 -> head. The list is what
// a pipeline cut divides into stages; no layer knows where it runs.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "model/layer.hpp"
#include "model/model_config.hpp"
#include "model/param_store.hpp"
#include "model/recompute.hpp"
#include "precision/precision_policy.hpp"

namespace avtrain {

// Layers [first, last) of the ordered list: a pipeline stage, or the whole net.
struct LayerRange {
  int first = 0, last = -1;  // last -1: to the end
};

class AVNet {
 public:
  // The ordered layer list has depth + 2 layers: input, blocks.0 .. blocks.N-1, head.
  static int layer_count(const ModelConfig& m) { return m.depth + 2; }
  static std::string layer_name(const ModelConfig& m, int i);

  // Builds the layers of `range` and registers their parameters in `params`; call
  // params.allocate(seed) and params.refresh_working() afterwards. Each module computes in the type
  // `policy` gives it; when the range is the whole net, a pattern of precision.fp32_layers that
  // names no module is an error. `recompute`: what the blocks keep for backward (the same bits
  // whatever it is).
  AVNet(Backend& be, ParamStore& params, const ModelConfig& m, const data::SetInfo& s,
        const PrecisionPolicy& policy = PrecisionPolicy(), LayerRange range = {},
        Recompute recompute = Recompute::none);
  bool has_input() const { return range_.first == 0; }
  bool has_head() const { return range_.last == last_; }
  // Global index (in the whole net's list) of local layer i.
  int global_index(std::size_t i) const { return range_.first + int(i); }
  std::vector<std::unique_ptr<Layer>>& layers() { return layers_; }
  // The parameters layer i registered: ids [first, second). A stage owns the union of its layers'.
  std::pair<ParamId, ParamId> param_range(std::size_t i) const { return param_ranges_[i]; }
  const TokenGeometry& geometry() const { return geometry_; }
  std::vector<std::unique_ptr<LayerState>> make_states() const;
  // fp32 scratch shared by all layers (not per micro-batch).
  const Workspace& workspace() const { return workspace_; }

  // Forward through the layers (the head leaves the loss and, in train mode, its gradient in the
  // flow); backward through them in reverse, calling after_layer(i) once layer i's gradients are in.
  void forward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states);
  // The input layer's stage() (AVInput): the samples of the next forward's micro-batch start their
  // copy to tensor memory. Nothing without the input layer.
  void stage_input(const data::MicroBatch& mb);
  void backward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states,
                const std::function<void(std::size_t)>& after_layer = {});

 private:
  TokenGeometry geometry_;
  LayerRange range_;
  int last_;
  Workspace workspace_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::pair<ParamId, ParamId>> param_ranges_;
};

}  // namespace avtrain
