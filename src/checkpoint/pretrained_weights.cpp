#include "checkpoint/pretrained_weights.hpp"

#include <string>

#include "checkpoint/torch_names.hpp"
#include "core/error.hpp"
#include "core/one_line.hpp"

namespace avtrain::checkpoint {

namespace {

constexpr const char* kAudioTokens = "avtrain.audio_tokens";
constexpr const char* kVideoTokens = "avtrain.video_tokens";
constexpr const char* kVideoTokensPerStep = "avtrain.video_tokens_per_step";

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<std::uint64_t> shape_of(const ParamInfo& p) { return {p.shape.begin(), p.shape.end()}; }

// The file's embed.pos fitted to this model's layout, by the layout the file's metadata states.
std::vector<float> fitted_positions(const io::SafetensorsReader& file, const io::SafetensorsEntry& t,
                                    const ParamInfo& p, const PositionLayout& layout, std::string& resized) {
  const std::string where = file.path() + ": tensor " + t.name;
  const std::optional<PositionLayout> from = read_layout(file);
  const bool same_shape = t.shape == shape_of(p);
  if (same_shape && (!from || *from == layout)) return file.floats(t);
  require(t.shape.size() == 2 && t.shape[1] == std::uint64_t(p.shape[1]),
          where + " has shape " + shape_text(t.shape) + ", this model's " + shape_text(shape_of(p)));
  require(from.has_value(), where + " has " + std::to_string(t.shape[0]) + " positions, this model " +
                                std::to_string(p.shape[0]) + ", and the file's metadata does not say how they split "
                                "into audio and video (" + kAudioTokens + ", " + kVideoTokens + ", " +
                                kVideoTokensPerStep + ") to interpolate each");
  require(std::uint64_t(from->tokens()) == t.shape[0],
          where + " has " + std::to_string(t.shape[0]) + " positions, its metadata says " +
              std::to_string(from->audio_tokens) + " audio + " + std::to_string(from->video_tokens) + " video tokens");
  resized = describe_resize(*from, layout);
  return resize_positions(file.floats(t), *from, layout, p.shape[1]);
}

}  // namespace

void write_layout(io::SafetensorsWriter& file, const PositionLayout& layout) {
  file.metadata(kAudioTokens, std::to_string(layout.audio_tokens));
  file.metadata(kVideoTokens, std::to_string(layout.video_tokens));
  file.metadata(kVideoTokensPerStep, std::to_string(layout.video_tokens_per_step));
}

std::optional<PositionLayout> read_layout(const io::SafetensorsReader& file) {
  const auto& m = file.metadata();
  if (!m.count(kAudioTokens) && !m.count(kVideoTokens) && !m.count(kVideoTokensPerStep)) return std::nullopt;
  auto number = [&](const char* key) {
    const auto it = m.find(key);
    require(it != m.end(), file.path() + ": its metadata has " + kAudioTokens + "... but no " + key);
    std::size_t used = 0;
    int value = -1;
    try {
      value = std::stoi(it->second, &used);
    } catch (const std::exception&) {
    }
    require(value >= 0 && used == it->second.size(),
            file.path() + ": its metadata " + key + " = '" + one_line(it->second) + "' is not a count");
    return value;
  };
  return PositionLayout{number(kAudioTokens), number(kVideoTokens), number(kVideoTokensPerStep)};
}

PretrainedLoad load_pretrained(const io::SafetensorsReader& file, NameGlobs& skip, const PositionLayout& layout,
                               const ParamStore& params, std::vector<float>& flat) {
  PretrainedLoad out;
  const std::vector<io::SafetensorsEntry>& tensors = file.tensors();
  out.used.assign(tensors.size(), 0);
  for (const ParamInfo& p : params.params()) {
    const std::optional<std::string> name = torch_name(p.name);
    if (!name) continue;  // step state: zero at a start
    const io::SafetensorsEntry* t = file.find(*name);
    if (t) out.used[t - tensors.data()] = 1;
    if (skip.match(p.name)) {
      ++out.skipped;
      continue;
    }
    require(t != nullptr, file.path() + ": no tensor " + *name + " (this model's " + shape_text(shape_of(p)) +
                              "); model.init_skip leaves a tensor at its fresh initial values");
    std::vector<float> values;
    if (p.name == kPositionalEmbedding) {
      values = fitted_positions(file, *t, p, layout, out.resized);
    } else {
      require(t->shape == shape_of(p), file.path() + ": tensor " + p.name + " has shape " + shape_text(t->shape) +
                                           ", this model's " + shape_text(shape_of(p)) +
                                           " (another model.* setting or number of classes? model.init_skip leaves it fresh)");
      values = file.floats(*t);
    }
    std::copy(values.begin(), values.end(), flat.begin() + std::ptrdiff_t(p.offset));
    ++out.loaded;
  }
  return out;
}

}  // namespace avtrain::checkpoint
