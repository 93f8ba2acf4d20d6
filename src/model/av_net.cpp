#include "model/av_net.hpp"

#include "model/av_head.hpp"
#include "model/av_input.hpp"
#include "model/transformer_block.hpp"
#include "core/error.hpp"

namespace avtrain {

AVNet::AVNet(Backend& be, ParamStore& params, const ModelConfig& m, const data::SetInfo& s,
             const PrecisionPolicy& policy)
    : geometry_(TokenGeometry::of(m, s)) {
  auto append = [&](std::unique_ptr<Layer> layer) {
    const ParamId first = param_ranges_.empty() ? 0 : param_ranges_.back().second;
    layers_.push_back(std::move(layer));
    param_ranges_.emplace_back(first, ParamId(params.params().size()));
  };
  append(std::make_unique<AVInput>(be, params, workspace_, policy, m, s));
  for (int i = 0; i < m.depth; ++i)
    append(std::make_unique<TransformerBlock>(be, params, workspace_, policy, m, i));
  append(std::make_unique<AVHead>(be, params, workspace_, policy, m, s.num_classes));
  for (const std::string& p : policy.unused_patterns())
    throw Error("precision.fp32_layers: '" + p + "' matches no module (modules are named like audio.conv, embed, "
                "blocks.0.attn.qkv, head.cls)");
}

std::vector<std::unique_ptr<LayerState>> AVNet::make_states() const {
  std::vector<std::unique_ptr<LayerState>> states;
  for (const auto& layer : layers_) states.push_back(layer->make_state());
  return states;
}

void AVNet::forward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states) {
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i]->forward(flow, *states[i]);
}

void AVNet::backward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states) {
  for (std::size_t i = layers_.size(); i-- > 0;) layers_[i]->backward(flow, *states[i]);
}

}  // namespace avtrain
