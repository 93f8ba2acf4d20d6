#pragma once
// The one name map between avtrain's tensors and PyTorch's: validation/torch_avnet.py names its
// modules after avtrain's ParamStore names (blocks.0.attn.qkv.weight is its blocks[0].attn.qkv.weight),
// so a tensor keeps its name, and the tensors that are avtrain's step state alone have no PyTorch
// name and stay out of a safetensors file. The e2e tests hold this against the PyTorch module both
// ways: avtrain-export's file loads with load_state_dict(strict=True), and a state_dict saved by
// PyTorch gives model.init_from every tensor it needs and none it does not use.
#include <optional>
#include <string>

namespace avtrain::checkpoint {

// The tensor's name in torch_avnet.AVNet's state_dict, or nullopt when it has none: BatchNorm's
// batch_stat_sums (the statistics summed over a step's micro-batches, zero at every step boundary).
std::optional<std::string> torch_name(const std::string& name);

}  // namespace avtrain::checkpoint
