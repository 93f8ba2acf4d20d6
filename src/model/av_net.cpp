#include "model/av_net.hpp"

#include "model/av_head.hpp"
#include "model/av_input.hpp"
#include "model/transformer_block.hpp"
#include "core/error.hpp"

namespace avtrain {

std::string AVNet::layer_name(const ModelConfig& m, int i) {
  return i == 0 ? "input" : i == m.depth + 1 ? "head" : "blocks." + std::to_string(i - 1);
}

AVNet::AVNet(Backend& be, ParamStore& params, const ModelConfig& m, const data::SetInfo& s,
             const PrecisionPolicy& policy, LayerRange range, Recompute recompute)
    : geometry_(TokenGeometry::of(m, s)), range_(range), last_(layer_count(m)) {
  if (range_.last < 0) range_.last = last_;
  require(0 <= range_.first && range_.first < range_.last && range_.last <= last_, "internal: layer range");
  for (int i = range_.first; i < range_.last; ++i) {
    const ParamId first = ParamId(params.params().size());
    if (i == 0)
      layers_.push_back(std::make_unique<AVInput>(be, params, workspace_, policy, m, s));
    else if (i == last_ - 1)
      layers_.push_back(std::make_unique<AVHead>(be, params, workspace_, policy, m, s.num_classes));
    else
      layers_.push_back(std::make_unique<TransformerBlock>(be, params, workspace_, policy, m, i - 1, recompute));
    param_ranges_.emplace_back(first, ParamId(params.params().size()));
  }
  if (range_.first != 0 || range_.last != last_) return;
  for (const std::string& p : policy.unused_patterns())
    throw Error("precision.fp32_layers: '" + p + "' matches no module (modules are named like audio.conv, embed, "
                "blocks.0.attn.qkv, head.cls)");
}

std::vector<std::unique_ptr<LayerState>> AVNet::make_states() const {
  std::vector<std::unique_ptr<LayerState>> states;
  for (const auto& layer : layers_) states.push_back(layer->make_state());
  return states;
}

void AVNet::stage_input(const data::MicroBatch& mb) {
  if (has_input()) static_cast<AVInput&>(*layers_.front()).stage(mb);
}

void AVNet::forward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states) {
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i]->forward(flow, *states[i]);
}

void AVNet::backward(Flow& flow, std::vector<std::unique_ptr<LayerState>>& states,
                     const std::function<void(std::size_t)>& after_layer) {
  for (std::size_t i = layers_.size(); i-- > 0;) {
    layers_[i]->backward(flow, *states[i]);
    if (after_layer) after_layer(i);
  }
}

}  // namespace avtrain
