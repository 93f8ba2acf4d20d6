// Which linears multiply in FP8: precision.fp8_layers' globs less precision.fp32_layers', only under
// mode fp8; a glob of fp8_layers that matches no module is an error naming it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "precision/fp8_layers.hpp"

namespace avtrain {
namespace {

const std::vector<std::string> kLinears = {"video.patch",     "blocks.0.attn.qkv", "blocks.0.attn.proj",
                                           "blocks.0.mlp.fc1", "blocks.1.mlp.fc2", "head.cls"};

PrecisionConfig fp8_config(const std::string& fp8_layers, const std::string& fp32_layers = "") {
  PrecisionConfig c;
  c.mode = PrecisionMode::fp8;
  c.fp8_layers = fp8_layers;
  c.fp32_layers = fp32_layers;
  return c;
}

std::vector<std::string> in_fp8(Fp8Layers& layers) {
  std::vector<std::string> chosen;
  for (const std::string& l : kLinears)
    if (layers.in_fp8(l)) chosen.push_back(l);
  return chosen;
}

TEST(Fp8Layers, EveryLinearByDefaultLessThoseKeptInFp32) {
  Fp8Layers all(fp8_config(PrecisionConfig{}.fp8_layers));
  EXPECT_EQ(in_fp8(all), kLinears);
  Fp8Layers ends(fp8_config("*", "video.patch, head.*"));
  EXPECT_EQ(in_fp8(ends), (std::vector<std::string>{"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc1",
                                                     "blocks.1.mlp.fc2"}));
  EXPECT_NO_THROW(ends.require_every_glob_used());
}

TEST(Fp8Layers, GlobsChooseAndOtherModesHaveNone) {
  Fp8Layers mlp(fp8_config(" blocks.*.mlp.* , head.cls"));
  EXPECT_EQ(in_fp8(mlp), (std::vector<std::string>{"blocks.0.mlp.fc1", "blocks.1.mlp.fc2", "head.cls"}));
  EXPECT_NO_THROW(mlp.require_every_glob_used());
  for (const PrecisionMode m : {PrecisionMode::fp32, PrecisionMode::fp16, PrecisionMode::bf16}) {
    PrecisionConfig c = fp8_config("blocks.9.*");
    c.mode = m;
    Fp8Layers none(c);
    EXPECT_TRUE(in_fp8(none).empty()) << enum_name(m);
    EXPECT_NO_THROW(none.require_every_glob_used()) << "the option is not read outside mode fp8";
  }
}

TEST(Fp8Layers, AGlobThatMatchesNoModuleIsAnErrorNamingIt) {
  Fp8Layers typo(fp8_config("blocks.*.attn.*,blocks.9.*"));
  in_fp8(typo);
  try {
    typo.require_every_glob_used();
    FAIL() << "blocks.9.* matched nothing";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "precision.fp8_layers: 'blocks.9.*' matches no module (they are named like blocks.0.attn.qkv, "
              "blocks.0.mlp.fc2, head.cls)");
  }
  // A glob that matches only modules kept in fp32 still matched: fp32_layers decides, not a typo.
  Fp8Layers kept(fp8_config("head.*", "head.*"));
  EXPECT_TRUE(in_fp8(kept).empty());
  EXPECT_NO_THROW(kept.require_every_glob_used());
  // A glob naming a module that is not a linear (the plan's input group: audio.bn) is no typo; the
  // module stays out of FP8.
  Fp8Layers group(fp8_config("audio.bn,blocks.*"));
  group.note_module("audio.bn");
  EXPECT_FALSE(in_fp8(group).empty());
  EXPECT_NO_THROW(group.require_every_glob_used());
  Fp8Layers unnoted(fp8_config("audio.bn,blocks.*"));
  in_fp8(unnoted);
  EXPECT_THROW(unnoted.require_every_glob_used(), Error);
}

}  // namespace
}  // namespace avtrain
