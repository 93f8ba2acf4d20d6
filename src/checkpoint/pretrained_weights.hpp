#pragma once
// Weights in and out as safetensors (docs/safetensors.md): a model's tensors under their ParamStore
// names, which are also the PyTorch module names of validation/torch_avnet.py's AVNet, so that a
// file goes both ways as it is. The metadata avtrain writes says how the positional embedding's rows
// split into audio and video, so that a model for clips of another length can start from the file.
#include <optional>
#include <vector>

#include "core/name_globs.hpp"
#include "io/safetensors_file.hpp"
#include "model/param_store.hpp"
#include "model/position_resize.hpp"

namespace avtrain::checkpoint {

// The metadata keys of the layout: avtrain.audio_tokens, avtrain.video_tokens, avtrain.video_tokens_per_step.
void write_layout(io::SafetensorsWriter& file, const PositionLayout& layout);
// The layout the file's metadata states, or nullopt when it states none (a file from elsewhere).
std::optional<PositionLayout> read_layout(const io::SafetensorsReader& file);

// What one stage took from a file.
struct PretrainedLoad {
  std::vector<char> used;  // per tensor of the file (its tensors() order): a parameter of this stage has its name
  std::string resized;     // how embed.pos was fitted to this model ("" : it was not)
  int loaded = 0, skipped = 0;
};

// Into `flat` (the stage's values at the ParamStore's flat offsets, holding their fresh initial
// values): every parameter of `params` from the file's tensor of its name (checkpoint/torch_names.hpp),
// converted to fp32, except those a glob of `skip` matches and the step state (left fresh). A parameter the file lacks, or holds in another shape,
// is an Error naming the tensor and the file; embed.pos for another number of tokens is interpolated
// per modality (model/position_resize.hpp) when the file's metadata states its layout.
PretrainedLoad load_pretrained(const io::SafetensorsReader& file, NameGlobs& skip, const PositionLayout& layout,
                               const ParamStore& params, std::vector<float>& flat);

}  // namespace avtrain::checkpoint
