// A stage's parameters from a safetensors file (checkpoint/pretrained_weights, model.init_from): by
// name (checkpoint/torch_names: the step state has none), init_skip's globs left fresh, a missing or
// mis-shaped tensor refused naming it, and the positional embedding of another clip length
// interpolated per modality as torch.nn.functional.interpolate(mode="linear", align_corners=False)
// does (model/position_resize).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/pretrained_weights.hpp"
#include "checkpoint/torch_names.hpp"
#include "core/error.hpp"
#include "core/name_globs.hpp"
#include "io/safetensors_file.hpp"
#include "model/param_store.hpp"
#include "model/position_resize.hpp"

using avtrain::Init;
using avtrain::NameGlobs;
using avtrain::ParamStore;
using avtrain::PositionLayout;
using avtrain::checkpoint::load_pretrained;

namespace {

constexpr int kWidth = 2;

std::string temp_path(const std::string& name) {
  const std::string dir = testing::TempDir() + "/pretrained_weights_test";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

// A model of the parameters init_from meets: the positional embedding, a block's weight, a BatchNorm
// statistic and a head for `classes` classes.
struct Model {
  ParamStore params;
  PositionLayout layout;
  Model(PositionLayout l, int classes) : layout(l) {
    params.add("embed", "pos", {l.tokens(), kWidth}, Init::normal, 0.02f, true);
    params.add("blocks.0.mlp.fc1", "weight", {3, kWidth}, Init::normal, 0.02f, true);
    params.add("audio.bn", "running_var", {kWidth}, Init::ones, 0, false, false);
    params.add("audio.bn", "batch_stat_sums", {2, kWidth}, Init::zeros, 0, false, false);
    params.add("head.cls", "weight", {classes, 2 * kWidth}, Init::normal, 0.02f, true);
  }
  std::vector<float> fresh() const {
    std::vector<float> flat;
    params.draw_initial(flat, 7);
    return flat;
  }
  const avtrain::ParamInfo& info(const std::string& name) const {
    for (const auto& p : params.params())
      if (p.name == name) return p;
    throw std::out_of_range(name);
  }
  std::vector<float> value(const std::vector<float>& flat, const std::string& name) const {
    const auto& p = info(name);
    return {flat.begin() + std::ptrdiff_t(p.offset), flat.begin() + std::ptrdiff_t(p.offset + p.size)};
  }
};

// A file holding every parameter of `m`, element k of each equal to `base + k`, and the layout.
std::string file_of(const Model& m, const std::string& name, float base, bool with_layout = true,
                    const std::string& extra = "") {
  avtrain::io::SafetensorsWriter w(avtrain::DType::f32);
  for (const auto& p : m.params.params()) {
    if (!avtrain::checkpoint::torch_name(p.name)) continue;  // as avtrain-export leaves it out
    std::vector<float> v(p.size);
    for (std::size_t k = 0; k < p.size; ++k) v[k] = base + float(k);
    w.tensor(p.name, {p.shape.begin(), p.shape.end()}, v.data());
  }
  if (!extra.empty()) {
    const float one = 1;
    w.tensor(extra, {1}, &one);
  }
  if (with_layout) avtrain::checkpoint::write_layout(w, m.layout);
  const std::string path = temp_path(name);
  w.write(path);
  return path;
}

std::string refusal(const std::string& path, Model& m, const std::string& skip = "") {
  std::vector<float> flat = m.fresh();
  NameGlobs globs(skip);
  try {
    load_pretrained(avtrain::io::SafetensorsReader(path), globs, m.layout, m.params, flat);
  } catch (const avtrain::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << path << " was taken";
  return "";
}

const PositionLayout kLayout{4, 4, 2};  // 4 audio tokens; 2 tubelet steps of a 2-token video grid

}  // namespace

TEST(PositionResize, AudioRowsInterpolateAsTorchLinearWithoutAlignedCorners) {
  // F.interpolate(torch.tensor([[[0., 1.]]]), size=4, mode="linear") = [0, 0.25, 0.75, 1]; video kept.
  const std::vector<float> pos = {0, 1, 10, 20};  // width 1: audio 0, 1; video one step of grid 2
  const std::vector<float> out = avtrain::resize_positions(pos, {2, 2, 2}, {4, 2, 2}, 1);
  EXPECT_EQ(out, (std::vector<float>{0, 0.25f, 0.75f, 1, 10, 20}));
}

TEST(PositionResize, VideoRowsInterpolateOverTubeletStepsAtEachGridCell) {
  // Video: steps (a0 b0), (a1 b1), (a2 b2) with a_t = t, b_t = 10 t, to 2 steps: samples at 0.25 and 1.75.
  const std::vector<float> pos = {5, 0, 0, 1, 10, 2, 20};  // audio one token, then the video
  const std::vector<float> out = avtrain::resize_positions(pos, {1, 6, 2}, {1, 4, 2}, 1);
  EXPECT_EQ(out, (std::vector<float>{5, 0.25f, 2.5f, 1.75f, 17.5f}));
  EXPECT_EQ(avtrain::describe_resize({1, 6, 2}, {1, 4, 2}), "video 6 -> 4 tokens (3 -> 2 tubelet steps of 2)");
}

TEST(PositionResize, TheSameLayoutIsTheIdentityAndAnotherGridIsRefused) {
  const std::vector<float> pos = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  EXPECT_EQ(avtrain::resize_positions(pos, kLayout, kLayout, 2), pos);
  EXPECT_THROW(avtrain::resize_positions(pos, kLayout, {4, 4, 4}, 2), avtrain::Error);
}

TEST(TorchNames, ATensorKeepsItsNameAndStepStateHasNone) {
  using avtrain::checkpoint::torch_name;
  EXPECT_EQ(torch_name("blocks.3.attn.qkv.weight"), "blocks.3.attn.qkv.weight");
  EXPECT_EQ(torch_name("audio.bn.running_mean"), "audio.bn.running_mean");
  EXPECT_EQ(torch_name("embed.pos"), "embed.pos");
  EXPECT_EQ(torch_name("audio.bn.batch_stat_sums"), std::nullopt);
}

TEST(PretrainedWeights, EveryParameterLoadsByName) {
  Model m(kLayout, 3);
  const std::string path = file_of(m, "same.safetensors", 100, true, "decoder.extra");
  std::vector<float> flat = m.fresh();
  NameGlobs none("");
  const avtrain::io::SafetensorsReader file(path);
  const auto got = load_pretrained(file, none, m.layout, m.params, flat);
  EXPECT_EQ(got.loaded, 4);
  EXPECT_EQ(got.skipped, 0);
  EXPECT_EQ(got.resized, "");
  EXPECT_EQ(m.value(flat, "head.cls.weight")[5], 105.0f);
  EXPECT_EQ(m.value(flat, "audio.bn.running_var"), (std::vector<float>{100, 101}));
  EXPECT_EQ(m.value(flat, "audio.bn.batch_stat_sums"), std::vector<float>(2 * kWidth, 0.0f));  // step state
  // The file's extra tensor is the one no parameter used.
  for (std::size_t i = 0; i < file.tensors().size(); ++i)
    EXPECT_EQ(got.used[i] != 0, file.tensors()[i].name != "decoder.extra") << file.tensors()[i].name;
}

TEST(PretrainedWeights, SkippedParametersKeepTheirFreshValuesAndAnotherHeadLoads) {
  Model pretrained(kLayout, 5), m(kLayout, 3);
  const std::string path = file_of(pretrained, "five_classes.safetensors", 100);
  std::vector<float> flat = m.fresh();
  NameGlobs skip("head.cls.*, nothing.*");
  const auto got = load_pretrained(avtrain::io::SafetensorsReader(path), skip, m.layout, m.params, flat);
  EXPECT_EQ(got.loaded, 3);
  EXPECT_EQ(got.skipped, 1);
  EXPECT_EQ(m.value(flat, "head.cls.weight"), m.value(m.fresh(), "head.cls.weight"));
  EXPECT_EQ(m.value(flat, "blocks.0.mlp.fc1.weight")[0], 100.0f);
  EXPECT_EQ(skip.used(), (std::vector<bool>{true, false}));
}

TEST(PretrainedWeights, RefusesAMisShapedTensorNamingIt) {
  Model pretrained(kLayout, 5), m(kLayout, 3);
  const std::string path = file_of(pretrained, "mis_shaped.safetensors", 0);
  const std::string e = refusal(path, m);
  EXPECT_NE(e.find(path + ": tensor head.cls.weight has shape [5, 4], this model's [3, 4]"), std::string::npos) << e;
}

TEST(PretrainedWeights, RefusesAMissingTensorNamingIt) {
  Model small(kLayout, 3), m(kLayout, 3);
  m.params.add("blocks.1.mlp.fc1", "weight", {3, kWidth}, Init::normal, 0.02f, true);
  const std::string path = file_of(small, "missing.safetensors", 0);
  const std::string e = refusal(path, m);
  EXPECT_NE(e.find(path + ": no tensor blocks.1.mlp.fc1.weight (this model's [3, 2])"), std::string::npos) << e;
  std::vector<float> flat = m.fresh();
  NameGlobs skip("blocks.1.*");
  EXPECT_EQ(load_pretrained(avtrain::io::SafetensorsReader(path), skip, m.layout, m.params, flat).skipped, 1);
}

TEST(PretrainedWeights, PositionsOfAnotherClipLengthInterpolatePerModality) {
  Model longer({6, 6, 2}, 3), m(kLayout, 3);
  const std::string path = file_of(longer, "longer.safetensors", 0);
  std::vector<float> flat = m.fresh();
  NameGlobs none("");
  const auto got = load_pretrained(avtrain::io::SafetensorsReader(path), none, m.layout, m.params, flat);
  EXPECT_EQ(got.resized, "audio 6 -> 4 tokens, video 6 -> 4 tokens (3 -> 2 tubelet steps of 2)");
  std::vector<float> file_pos(12 * kWidth);
  for (std::size_t k = 0; k < file_pos.size(); ++k) file_pos[k] = float(k);
  EXPECT_EQ(m.value(flat, "embed.pos"), avtrain::resize_positions(file_pos, longer.layout, m.layout, kWidth));
  // Audio row 0 of 4 samples the file's 6 rows at 0.25: 0.75 row 0 + 0.25 row 1.
  EXPECT_FLOAT_EQ(m.value(flat, "embed.pos")[0], 0.5f);
}

TEST(PretrainedWeights, PositionsOfAnotherLengthWithoutTheLayoutAreRefused) {
  Model longer({6, 6, 2}, 3), m(kLayout, 3);
  const std::string path = file_of(longer, "no_layout.safetensors", 0, false);
  const std::string e = refusal(path, m);
  EXPECT_NE(e.find(path + ": tensor embed.pos has 12 positions, this model 8"), std::string::npos) << e;
}

// A metadata value from the file is shown on one line, its control characters written as \xNN.
TEST(PretrainedWeights, ALayoutValueThatIsNotACountIsRefusedOnOneLine) {
  avtrain::io::SafetensorsWriter w(avtrain::DType::f32);
  const float x = 1;
  w.tensor("w", {1}, &x);
  w.metadata("avtrain.audio_tokens", "4\n5");
  w.metadata("avtrain.video_tokens", "4");
  w.metadata("avtrain.video_tokens_per_step", "2");
  const std::string path = temp_path("layout_newline.safetensors");
  w.write(path);
  try {
    avtrain::checkpoint::read_layout(avtrain::io::SafetensorsReader(path));
    ADD_FAILURE() << "a layout of '4\\n5' audio tokens was taken";
  } catch (const avtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("its metadata avtrain.audio_tokens = '4\\x0a5' is not a count"),
              std::string::npos) << e.what();
  }
}
