// avtrain-export: a committed checkpoint's weights as one safetensors file (docs/safetensors.md),
// under the names that validation/torch_avnet.py's modules have, so that PyTorch loads it with
// safetensors.torch.load_file and load_state_dict, and model.init_from starts a run from it. Every
// stage of a pipeline-parallel checkpoint, and the pieces ZeRO's replicas wrote, are put together.
#include <boost/program_options.hpp>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "app/tool_main.hpp"
#include "checkpoint/pretrained_weights.hpp"
#include "checkpoint/stage_checkpoint.hpp"
#include "checkpoint/torch_names.hpp"
#include "core/error.hpp"
#include "data/augment.hpp"
#include "io/safetensors_file.hpp"
#include "model/model_config.hpp"
#include "model/position_resize.hpp"
#include "train/checkpointing.hpp"

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage = "avtrain-export CHECKPOINT --out FILE.safetensors [--dtype fp32|bf16]";

// How the checkpoint's positional embedding splits into audio and video: the token geometry of the
// model and clip shape its fingerprint records (data.clip_seconds cuts the stored clips).
avtrain::PositionLayout layout_of(const nlohmann::json& fingerprint, const std::string& checkpoint) {
  try {
    const nlohmann::json& m = fingerprint.at("model");
    const nlohmann::json& d = fingerprint.at("data");
    avtrain::ModelConfig model;
    model.width = m.at("width");
    model.heads = m.at("heads");
    model.audio_window = m.at("audio_window");
    model.audio_hop = m.at("audio_hop");
    model.tubelet_frames = m.at("tubelet_frames");
    model.patch = m.at("patch");
    avtrain::data::SetInfo stored;
    stored.sample_rate = d.at("sample_rate");
    stored.fps = d.at("fps");
    stored.audio_samples = d.at("audio_samples");
    const nlohmann::json& video = d.at("video_shape");
    stored.frames = video.at(0), stored.height = video.at(1), stored.width = video.at(2), stored.channels = video.at(3);
    const double clip_seconds = fingerprint.contains("augment") ? fingerprint["augment"].value("data.clip_seconds", 0.0) : 0.0;
    return avtrain::PositionLayout::of(
        avtrain::TokenGeometry::of(model, avtrain::data::cropped_input(stored, clip_seconds)));
  } catch (const nlohmann::json::exception& e) {
    throw avtrain::Error("checkpoint " + checkpoint + ": its fingerprint does not give the model's token layout (" +
                         e.what() + ")");
  }
}

int run(int argc, char** argv) {
  std::string checkpoint, out, dtype_word = "fp32";
  po::options_description opts(std::string(kUsage) + "\n\nWrites the weights of a committed checkpoint "
                               "(OUT/checkpoints/step-NNNNNNN) as one safetensors file");
  opts.add_options()("help,h", "print this help")("out", po::value(&out), "the safetensors file to write")(
      "dtype", po::value(&dtype_word)->default_value(dtype_word),
      "fp32, or bf16 (rounded to nearest even; BatchNorm's running statistics too)");
  po::options_description hidden;
  hidden.add_options()("checkpoint", po::value(&checkpoint));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description positional;
  positional.add("checkpoint", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw avtrain::Error(std::string("command line: ") + e.what() + " (usage: " + kUsage + ")");
  }
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  avtrain::require(!checkpoint.empty() && !out.empty(), std::string("usage: ") + kUsage);
  avtrain::require(dtype_word == "fp32" || dtype_word == "bf16",
                   "--dtype " + dtype_word + ": must be fp32 or bf16");
  const avtrain::DType dtype = dtype_word == "fp32" ? avtrain::DType::f32 : avtrain::DType::bf16;

  const avtrain::checkpoint::Checkpoint ck(avtrain::Checkpointing::stage_files(checkpoint));
  avtrain::io::SafetensorsWriter file(dtype);
  file.metadata("format", "pt");  // what transformers' loaders look for
  file.metadata("avtrain.checkpoint", checkpoint);
  file.metadata("avtrain.step", std::to_string(ck.counters().next_step));
  file.metadata("avtrain.fingerprint", ck.fingerprint().dump());
  avtrain::checkpoint::write_layout(file, layout_of(ck.fingerprint(), checkpoint));
  std::uint64_t elements = 0;
  const auto tensors = ck.held("params");
  avtrain::require(!tensors.empty(), "checkpoint " + checkpoint + ": no tensor under params/");
  std::size_t written = 0;
  for (const auto& [name, shape] : tensors) {
    const std::optional<std::string> torch = avtrain::checkpoint::torch_name(name);
    if (!torch) continue;  // step state, not the model's
    const std::vector<float> values = ck.tensor("params/" + name, shape);
    file.tensor(*torch, shape, values.data());
    elements += values.size();
    ++written;
  }
  file.write(out);
  std::cout << "avtrain-export: " << written << " tensors (" << elements << " values, " << dtype_word
            << ") of " << checkpoint << " (step " << ck.counters().next_step << ") written to " << out << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return avtrain::run_tool("avtrain-export", argc, argv, run); }
