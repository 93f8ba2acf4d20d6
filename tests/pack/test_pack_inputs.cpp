// The pack's inputs: CSV records, manifests and trees, the class list, the plan's shards.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "../data/temp_dir.hpp"
#include "core/error.hpp"
#include "data/shard_reader.hpp"
#include "data/shard_writer.hpp"
#include "pack/clip_list.hpp"
#include "pack/pack_plan.hpp"

namespace avtrain::pack {
namespace {

void write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CsvRecord, SplitsQuotedFieldsWithCommasAndQuotes) {
  EXPECT_EQ(split_csv_record("a, b ,c"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(split_csv_record("\"x, y\",\"say \"\"hi\"\"\","), (std::vector<std::string>{"x, y", "say \"hi\"", ""}));
  EXPECT_THROW(split_csv_record("\"open"), Error);
  EXPECT_THROW(split_csv_record("a\"b"), Error);
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
  EXPECT_EQ(split_csv_record(csv_field("a, \"b\"")), std::vector<std::string>{"a, \"b\""});
}

TEST(Manifest, ReadsColumnsResolvesPathsAndSortsClasses) {
  test::TempDir dir;
  write(dir / "lists/m.csv",
        "label,path,start,duration,audio_path\n"
        "dog,clips/a.mp4,1.5,,\n"
        "\n"
        "cat,/abs/b.mkv,,2,sounds/b.wav\n"
        "\"bird, small\",c.webm,0,0,\n");
  const ClipList list = read_manifest(dir / "lists/m.csv", {});
  ASSERT_EQ(list.clips.size(), 3u);
  EXPECT_EQ(list.clips[0].path, dir / "lists/clips/a.mp4");
  EXPECT_EQ(list.clips[0].start, 1.5);
  EXPECT_EQ(list.clips[0].line, 2);
  EXPECT_EQ(list.clips[1].path, "/abs/b.mkv");
  EXPECT_EQ(list.clips[1].audio_path, dir / "lists/sounds/b.wav");
  EXPECT_EQ(list.clips[1].duration, 2);
  EXPECT_EQ(list.clips[1].line, 4);
  EXPECT_EQ(list.class_names, (std::vector<std::string>{"bird, small", "cat", "dog"}));
  // A class list given keeps its order, and a label outside it stays for the report.
  EXPECT_EQ(read_manifest(dir / "lists/m.csv", {"dog", "cat"}).class_names, (std::vector<std::string>{"dog", "cat"}));
}

TEST(Manifest, RefusesMalformedOnesNamingFileAndLine) {
  test::TempDir dir;
  const std::string m = dir / "m.csv";
  write(m, "path,lable\na.mp4,cat\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }),
            m + ":1: unknown column \"lable\" (columns: path, label required; audio_path, start, duration)");
  write(m, "path,start\na.mp4,1\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":1: the header has no column \"label\"");
  write(m, "path,label\na.mp4,cat,extra\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":2: 3 fields, the header has 2");
  write(m, "path,label,start\na.mp4,cat,soon\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":2: start = \"soon\" is not a number of seconds >= 0");
  write(m, "path,label,start\na.mp4,cat,-1\n");
  EXPECT_NE(error_of([&] { read_manifest(m, {}); }).find(":2: start = \"-1\""), std::string::npos);
  write(m, "path,label\na.mp4,\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":2: the label is empty");
  write(m, "path,label\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ": the manifest lists no clip");
  EXPECT_EQ(error_of([&] { read_manifest(dir / "none.csv", {}); }), dir / "none.csv" + ": cannot read the manifest (--manifest)");
}

TEST(Tree, ClassesAreFoldersFilesInNameOrderHiddenSkipped) {
  test::TempDir dir;
  write(dir / "t/zebra/2.mp4", "");
  write(dir / "t/zebra/1.mp4", "");
  write(dir / "t/ant/deep/x.wav", "");
  write(dir / "t/ant/.hidden.mp4", "");
  write(dir / "t/.cache/y.mp4", "");
  std::filesystem::create_directories(dir / "t/empty");
  const ClipList list = read_tree(dir / "t", {});
  EXPECT_EQ(list.class_names, (std::vector<std::string>{"ant", "empty", "zebra"}));
  ASSERT_EQ(list.clips.size(), 3u);
  EXPECT_EQ(list.clips[0].path, dir / "t/ant/deep/x.wav");
  EXPECT_EQ(list.clips[0].label, "ant");
  EXPECT_EQ(list.clips[1].path, dir / "t/zebra/1.mp4");
  EXPECT_EQ(list.clips[2].line, 3);
  EXPECT_NE(error_of([&] { read_tree(dir / "none", {}); }).find("is not a directory (--tree)"), std::string::npos);
}

TEST(ClassFile, OneNamePerLineCommentsSkippedDuplicatesRefused) {
  test::TempDir dir;
  write(dir / "c.txt", "# classes\nb\n\na\n");
  EXPECT_EQ(read_class_file(dir / "c.txt"), (std::vector<std::string>{"b", "a"}));
  write(dir / "c.txt", "a\nb\na\n");
  EXPECT_EQ(error_of([&] { read_class_file(dir / "c.txt"); }), dir / "c.txt" + ":3: class \"a\" is listed twice");
}

TEST(Plan, ShardsAreFixedRangesOfTheListAndLabelsIndexTheClassList) {
  test::TempDir dir;
  std::string text = "path,label\n";
  for (int i = 0; i < 10; ++i) text += "f" + std::to_string(i) + ".mp4," + (i % 2 ? "odd" : "even") + "\n";
  text += "g.mp4,neither\n";
  write(dir / "m.csv", text);
  write(dir / "c.txt", "odd\neven\n");
  PackOptions o;
  o.manifest = dir / "m.csv";
  o.out = dir / "out";
  o.classes_file = dir / "c.txt";
  o.shard_size = 4;
  o.shape.seconds = 2;
  o.shape.sample_rate = 16000;
  o.shape.fps = 12.5;
  const PackPlan plan = make_plan(o);
  EXPECT_EQ(plan.shards(), 3);
  EXPECT_EQ(plan.first_clip(2), 8);
  EXPECT_EQ(plan.end_clip(2), 11);
  EXPECT_EQ(plan.shard_path(2), (std::filesystem::path(o.out) / "shard-00002.h5").string());
  EXPECT_EQ(plan.options.shape.audio_samples, 32000);
  EXPECT_EQ(plan.options.shape.frames, 25);
  EXPECT_EQ(plan.class_index[0], 1);
  EXPECT_EQ(plan.class_index[1], 0);
  EXPECT_EQ(plan.class_index[10], -1);
  // What the set depends on: not the threads or the delay of a test.
  PackOptions other = o;
  other.debug_delay_ms = 50;
  EXPECT_EQ(make_plan(other).description(), plan.description());
  other.shard_size = 5;
  EXPECT_NE(make_plan(other).description(), plan.description());

  o.shape.channels = 2;
  EXPECT_EQ(error_of([&] { make_plan(o); }), "--pixels must be gray or rgb");
}

// A tree of `per_class` files in each of three classes under `root`, packed with --val-fraction.
PackPlan split_tree(const std::string& root, int per_class, double fraction) {
  for (const char* c : {"a", "b", "c"})
    for (int i = 0; i < per_class; ++i) write(root + "/" + c + "/clip-" + std::to_string(i) + ".mp4", "");
  PackOptions o;
  o.tree = root;
  o.out = root + "-out";
  o.val_fraction = fraction;
  return make_plan(o);
}

std::map<std::string, int> sides_by_file(const std::vector<PackPlan>& sides, const std::string& root) {
  std::map<std::string, int> by_file;
  for (int side = 0; side < 2; ++side)
    for (const ClipEntry& c : sides[side].list.clips)
      by_file[std::filesystem::path(c.path).lexically_relative(root).string()] = side;
  return by_file;
}

TEST(Split, AClipKeepsItsSideWhenFilesAreAddedAndTheFolderMoves) {
  test::TempDir dir;
  const std::vector<PackPlan> before = split_plans(split_tree(dir / "t", 40, 0.2));
  const std::map<std::string, int> was = sides_by_file(before, dir / "t");
  // The same folder with 60 more files a class, and a copy of it somewhere else.
  const std::vector<PackPlan> after = split_plans(split_tree(dir / "t", 60, 0.2));
  const std::map<std::string, int> now = sides_by_file(after, dir / "t");
  std::filesystem::create_directories(dir / "elsewhere");
  std::filesystem::copy(dir / "t", dir / "elsewhere/t", std::filesystem::copy_options::recursive);
  const std::map<std::string, int> moved = sides_by_file(split_plans(split_tree(dir / "elsewhere/t", 60, 0.2)),
                                                         dir / "elsewhere/t");
  int validation = 0;
  for (const auto& [file, side] : was) EXPECT_EQ(now.at(file), side) << file << " changed sides when files were added";
  for (const auto& [file, side] : now) {
    EXPECT_EQ(moved.at(file), side) << file << " changed sides when the folder moved";
    validation += side;
  }
  // About the fraction asked for (180 clips: 36 expected; a binomial's 3 sigma is 16).
  EXPECT_GT(validation, 20);
  EXPECT_LT(validation, 52);
  // Both sides: the same classes, the outputs OUT/train and OUT/val, labels of the whole class list.
  for (int side = 0; side < 2; ++side) {
    EXPECT_EQ(after[side].list.class_names, (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(after[side].options.out, (std::filesystem::path(dir / "t-out") / (side ? "val" : "train")).string());
    ASSERT_EQ(after[side].class_index.size(), after[side].list.clips.size());
    for (std::size_t i = 0; i < after[side].list.clips.size(); ++i)
      EXPECT_EQ(after[side].list.class_names[std::size_t(after[side].class_index[i])], after[side].list.clips[i].label);
  }
  EXPECT_EQ(after[0].list.clips.size() + after[1].list.clips.size(), 180u);
}

TEST(Split, RefusesAFractionThatLeavesASideEmptyOrIsOutOfRange) {
  test::TempDir dir;
  EXPECT_NE(error_of([&] { split_plans(split_tree(dir / "t", 1, 1e-9)); }).find("no clip of the 3 falls to validation: raise it"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { split_tree(dir / "t", 1, 1.0); }), "--val-fraction must be in [0, 1) (0.1: a tenth of the clips for validation)");
  EXPECT_EQ(error_of([&] { split_tree(dir / "t", 1, -0.1); }), "--val-fraction must be in [0, 1) (0.1: a tenth of the clips for validation)");
}

TEST(ShardWriter, GrowsByBlocksAndKeepsClassNamesAndSources) {
  test::TempDir dir;
  data::ShardHeader h;
  h.path = dir / "s.h5";
  h.version = 1;
  h.sample_rate = 8000;
  h.fps = 8;
  h.num_classes = 2;
  h.audio_samples = 4;
  h.frames = 1;
  h.height = h.width = 2;
  h.channels = 1;
  h.audio_int16 = true;
  h.class_names = {"no", "yes"};
  h.packed_with = "{\"x\":1}";
  data::ShardLayout layout;
  layout.growable = true;
  layout.sources = true;
  {
    data::ShardWriter writer(h, layout);
    for (int b = 0; b < 3; ++b) {
      data::SampleBlock block;
      block.count = 2;
      block.audio_pcm.assign(8, std::int16_t(b));
      block.audio_len = {4, 3};
      block.video.assign(8, std::uint8_t(10 * b));
      block.video_len = {1, 1};
      block.label = {b % 2, 1};
      block.source = {"a" + std::to_string(b), "b"};
      writer.append(block);
    }
    EXPECT_EQ(writer.rows(), 6);
    writer.commit();
  }
  const data::ShardReader reader(h.path);
  EXPECT_EQ(reader.header().samples, 6);
  EXPECT_EQ(reader.header().class_names, h.class_names);
  EXPECT_EQ(reader.header().packed_with, h.packed_with);
  const data::ShardRows rows = reader.read_rows({0, 5});
  EXPECT_EQ(rows.label, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(rows.video[4], 20);
  EXPECT_EQ(reader.check_values(), (std::vector<std::int64_t>{2, 4}));
}

}  // namespace
}  // namespace avtrain::pack
