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
  EXPECT_EQ(list.clips[2].classes, std::vector<int>{0});
  EXPECT_FALSE(list.multi_label);
  // A class list given keeps its order, and a label outside it stays for the report.
  EXPECT_EQ(read_manifest(dir / "lists/m.csv", {"dog", "cat"}).class_names, (std::vector<std::string>{"dog", "cat"}));
}

TEST(Manifest, RefusesMalformedOnesNamingFileAndLine) {
  test::TempDir dir;
  const std::string m = dir / "m.csv";
  write(m, "path,lable\na.mp4,cat\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }),
            m + ":1: unknown column \"lable\" (columns: path, label or labels required; audio_path, start, duration)");
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
  EXPECT_EQ(list.clips[0].label_field, "ant");
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
  EXPECT_EQ(plan.list.clips[0].classes, std::vector<int>{1});
  EXPECT_EQ(plan.list.clips[1].classes, std::vector<int>{0});
  EXPECT_TRUE(plan.list.clips[10].classes.empty());
  EXPECT_EQ(plan.list.clips[10].unreadable, "label \"neither\" is not in the class list");
  EXPECT_FALSE(plan.list.multi_label);
  EXPECT_FALSE(plan.description().contains("labels"));
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
    for (const ClipEntry& clip : after[side].list.clips)
      EXPECT_EQ(std::vector<std::string>{after[side].list.class_names[std::size_t(clip.classes.at(0))]},
                std::vector<std::string>{clip.label_field});
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

TEST(LabelList, SplitsNamesAndRefusesEmptyOrDoubledOnes) {
  EXPECT_EQ(split_label_list("dog,bark"), (std::vector<std::string>{"dog", "bark"}));
  EXPECT_EQ(split_label_list(" dog , bark "), (std::vector<std::string>{"dog", "bark"}));
  EXPECT_EQ(split_label_list("\"Male speech, man speaking\",Dog"), (std::vector<std::string>{"Male speech, man speaking", "Dog"}));
  EXPECT_EQ(error_of([] { split_label_list(""); }), "the label set is empty");
  EXPECT_EQ(error_of([] { split_label_list(" "); }), "the label set is empty");
  EXPECT_EQ(error_of([] { split_label_list("dog,"); }), "the label list \"dog,\" has an empty name (name 2)");
  EXPECT_EQ(error_of([] { split_label_list("dog,,bark"); }), "the label list \"dog,,bark\" has an empty name (name 2)");
  EXPECT_EQ(error_of([] { split_label_list("dog,dog"); }), "the label list \"dog,dog\" names \"dog\" twice");
  EXPECT_EQ(error_of([] { split_label_list("\"dog,bark"); }), "a quoted field is not closed");
}

TEST(Manifest, ALabelsColumnListsSeveralClassesAMultiLabelInput) {
  test::TempDir dir;
  write(dir / "m.csv",
        "path,labels,start\n"
        "a.mp4,\"dog,bark\",0\n"
        "b.mp4,cat,2\n"
        "c.mp4,\" bark , cat ,dog\",\n");
  const ClipList list = read_manifest(dir / "m.csv", {});
  EXPECT_TRUE(list.multi_label);
  EXPECT_EQ(list.class_names, (std::vector<std::string>{"bark", "cat", "dog"}));  // the sorted union
  ASSERT_EQ(list.clips.size(), 3u);
  EXPECT_EQ(list.clips[0].classes, (std::vector<int>{0, 2}));
  EXPECT_EQ(list.clips[0].label_field, "dog,bark");
  EXPECT_EQ(list.clips[1].classes, std::vector<int>{1});
  EXPECT_EQ(list.clips[2].classes, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(list.clips[1].start, 2);
  // --classes: its order, and more classes than the manifest uses.
  const ClipList given = read_manifest(dir / "m.csv", {"dog", "cow", "cat", "bark"});
  EXPECT_EQ(given.class_names.size(), 4u);
  EXPECT_EQ(given.clips[0].classes, (std::vector<int>{0, 3}));
  EXPECT_EQ(given.clips[2].classes, (std::vector<int>{0, 2, 3}));
  for (const ClipEntry& c : given.clips) EXPECT_EQ(c.unreadable, "");
}

TEST(Manifest, RefusesBadLabelListsNamingFileAndLine) {
  test::TempDir dir;
  const std::string m = dir / "m.csv";
  write(m, "path,labels\na.mp4,dog\nb.mp4,\"dog,zebra\"\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {"dog", "cat"}); }), m + ":3: \"zebra\" is not in the class list (--classes)");
  write(m, "path,labels\na.mp4,dog\nb.mp4,\"\"\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":3: the label set is empty");
  write(m, "path,labels\na.mp4,\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":2: the label set is empty");
  write(m, "path,labels\na.mp4,\"dog,\"\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":2: the label list \"dog,\" has an empty name (name 2)");
  write(m, "path,labels\na.mp4,\"dog,bark\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":2: a quoted field is not closed");
  write(m, "path,labels\na.mp4,\"\"\"dog,bark\"\n");  // the list itself: "dog,bark (a quote not closed)
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":2: a quoted field is not closed");
  write(m, "path,labels\na.mp4,\"dog,cat,dog\"\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }), m + ":2: the label list \"dog,cat,dog\" names \"dog\" twice");
  write(m, "path,label,labels\na.mp4,dog,dog\n");
  EXPECT_EQ(error_of([&] { read_manifest(m, {}); }),
            m + ":1: the header has both \"label\" (one class a clip) and \"labels\" (a list): keep one");
  // One class a clip: a label outside --classes is kept, for the report (as before).
  write(m, "path,label\na.mp4,zebra\n");
  EXPECT_EQ(read_manifest(m, {"dog"}).clips[0].unreadable, "label \"zebra\" is not in the class list");
}

// AudioSet's files as Google publishes them (the first rows of class_labels_indices.csv and
// balanced_train_segments.csv), with a media folder of downloads named both ways.
struct AudiosetFolder {
  test::TempDir dir;
  AudiosetInput input;
  AudiosetFolder() {
    input.segments = dir / "balanced_train_segments.csv";
    input.class_index = dir / "class_labels_indices.csv";
    input.media = dir / "media";
    write(input.class_index,
          "index,mid,display_name\n"
          "0,/m/09x0r,\"Speech\"\n"
          "1,/m/05zppz,\"Male speech, man speaking\"\n"
          "2,/t/dd00088,\"Gush\"\n");
    write(input.segments,
          "# Segments csv created Sun Mar  5 10:54:31 2017\n"
          "# num_ytids=3, num_segs=3, num_unique_labels=3, num_positive_labels=5\n"
          "# YTID, start_seconds, end_seconds, positive_labels\n"
          "--PJHxphWEs, 30.000, 40.000, \"/m/09x0r,/t/dd00088\"\n"
          "--ZhevVpy1s, 50.000, 60.000, \"/m/05zppz\"\n"
          "--aE2O5G5WE, 0.000, 10.000, \"/t/dd00088,/m/05zppz,/m/09x0r\"\n"
          "-0SdAVK79lg, 4.5, 9.0, \"/m/09x0r\"\n");
    write(input.media + "/--PJHxphWEs.mp4", "");
    write(input.media + "/part01/Y--ZhevVpy1s.wav", "");
    write(input.media + "/--aE2O5G5WE.mkv", "");
    write(input.media + "/-0SdAVK79lg.mp4.part", "");  // an unfinished download
  }
  void segments(const std::string& rows) { write(input.segments, "# YTID, start_seconds, end_seconds, positive_labels\n" + rows); }
  std::string error() const { return error_of([&] { read_audioset(input); }); }
};

TEST(Audioset, ReadsSegmentsClassIndexAndMediaNamedEitherWay) {
  AudiosetFolder f;
  const ClipList list = read_audioset(f.input);
  EXPECT_TRUE(list.multi_label);
  EXPECT_EQ(list.class_names, (std::vector<std::string>{"Speech", "Male speech, man speaking", "Gush"}));
  ASSERT_EQ(list.clips.size(), 4u);
  EXPECT_EQ(list.clips[0].line, 4);
  EXPECT_EQ(list.clips[0].path, f.input.media + "/--PJHxphWEs.mp4");
  EXPECT_EQ(list.clips[0].classes, (std::vector<int>{0, 2}));
  EXPECT_EQ(list.clips[0].start, 0);  // a file holds its segment alone
  EXPECT_EQ(list.clips[0].duration, 10);
  EXPECT_EQ(list.clips[0].key, "--PJHxphWEs#t=30.000");
  EXPECT_EQ(list.clips[1].path, f.input.media + "/part01/Y--ZhevVpy1s.wav");
  EXPECT_EQ(list.clips[1].classes, std::vector<int>{1});
  EXPECT_EQ(list.clips[2].path, f.input.media + "/--aE2O5G5WE.mkv");
  EXPECT_EQ(list.clips[2].classes, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(list.clips[3].duration, 4.5);
  EXPECT_EQ(list.clips[3].unreadable, "no media file -0SdAVK79lg.* or Y-0SdAVK79lg.* in " + f.input.media);
  EXPECT_EQ(list.clips[3].path, f.input.media + "/-0SdAVK79lg");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(list.clips[std::size_t(i)].unreadable, "");
  // Whole videos: the segment starts at start_seconds.
  f.input.whole_videos = true;
  EXPECT_EQ(read_audioset(f.input).clips[1].start, 50);
}

TEST(Audioset, RefusesBadSegmentsNamingFileAndLine) {
  AudiosetFolder f;
  const std::string s = f.input.segments + ":2: ";
  f.segments("abc, 0, 10, \"/m/zzzz\"\n");
  EXPECT_EQ(f.error(), s + "\"/m/zzzz\" is not in the class index (" + f.input.class_index + ")");
  f.segments("abc, 0, 10, \"\"\n");
  EXPECT_EQ(f.error(), s + "the label set is empty");
  f.segments("abc, 0, 10, \"/m/09x0r,/t/dd00088\n");
  EXPECT_EQ(f.error(), s + "a quoted field is not closed");
  f.segments("abc, 0, 10, \"/m/09x0r,,/t/dd00088\"\n");
  EXPECT_EQ(f.error(), s + "the label list \"/m/09x0r,,/t/dd00088\" has an empty name (name 2)");
  f.segments("abc, 0, 10, \"/m/09x0r,/m/09x0r\"\n");
  EXPECT_EQ(f.error(), s + "the label list \"/m/09x0r,/m/09x0r\" names \"/m/09x0r\" twice");
  f.segments("abc, 3O.0, 40, \"/m/09x0r\"\n");
  EXPECT_EQ(f.error(), s + "start_seconds = \"3O.0\" is not a number of seconds >= 0");
  f.segments("abc, 30, , \"/m/09x0r\"\n");
  EXPECT_EQ(f.error(), s + "end_seconds = \"\" is not a number of seconds >= 0");
  f.segments("abc, 30, 30, \"/m/09x0r\"\n");
  EXPECT_EQ(f.error(), s + "end_seconds 30 is not after start_seconds 30");
  f.segments("abc, 30, 40, /m/09x0r, /t/dd00088\n");  // the list not quoted
  EXPECT_EQ(f.error(), s + "5 fields, expected 4 (YTID, start_seconds, end_seconds, positive_labels)");
  f.segments("../x, 30, 40, \"/m/09x0r\"\n");
  EXPECT_EQ(f.error(), s + "YTID \"../x\" is not a YouTube id (letters, digits, - and _)");
  f.segments("");
  EXPECT_EQ(f.error(), f.input.segments + ": lists no segment");
}

TEST(Audioset, RefusesABadClassIndexNamingFileAndLine) {
  AudiosetFolder f;
  const std::string& c = f.input.class_index;
  const auto index_error = [&](const std::string& text) {
    write(c, text);
    return error_of([&] { read_class_index(c); });
  };
  EXPECT_EQ(index_error("index,mid,name\n0,/m/a,A\n"), c + ":1: the header is not index,mid,display_name (AudioSet's class_labels_indices.csv)");
  EXPECT_EQ(index_error("index,mid,display_name\n0,/m/a,A\n1,/m/a,B\n"), c + ":3: mid \"/m/a\" is listed twice (line 2)");
  EXPECT_EQ(index_error("index,mid,display_name\n0,/m/a,A\n0,/m/b,B\n"), c + ":3: index 0 is listed twice (line 2)");
  EXPECT_EQ(index_error("index,mid,display_name\n0,/m/a,A\n2,/m/b,B\n"),
            c + ":3: index 2, expected 1: the classes must be numbered 0..N-1 in order");
  EXPECT_EQ(index_error("index,mid,display_name\n1,/m/a,A\n"), c + ":2: index 1, expected 0: the classes must be numbered 0..N-1 in order");
  EXPECT_EQ(index_error("index,mid,display_name\nx,/m/a,A\n"), c + ":2: index = \"x\" is not a whole number >= 0");
  EXPECT_EQ(index_error("index,mid,display_name\n0,/m/a,\n"), c + ":2: the display_name is empty");
  EXPECT_EQ(index_error("index,mid,display_name\n0,/m/a,\"A, b\n"), c + ":2: a quoted field is not closed");
  EXPECT_EQ(index_error("index,mid,display_name\n0,/m/a\n"), c + ":2: 2 fields, expected 3 (index,mid,display_name)");
  EXPECT_EQ(index_error("index,mid,display_name\n"), c + ": the class index lists no class");
}

TEST(Plan, AudiosetPacksSetsAndSplitsBySegmentNotByFile) {
  AudiosetFolder f;
  std::string rows;
  for (int i = 0; i < 60; ++i) {
    const std::string id = "vid" + std::to_string(1000 + i);
    rows += id + ", " + std::to_string(i) + ".000, " + std::to_string(i + 10) + ".000, \"/m/09x0r" +
            (i % 3 ? ",/t/dd00088\"\n" : "\"\n");
    if (i % 10) write(f.input.media + "/" + (i % 2 ? "Y" : "") + id + ".wav", "");
  }
  f.segments(rows);
  PackOptions o;
  o.audioset = f.input;
  o.out = f.dir / "out";
  o.val_fraction = 0.3;
  const PackPlan whole = make_plan(o);
  EXPECT_TRUE(whole.list.multi_label);
  EXPECT_EQ(whole.description()["labels"], "sets");
  EXPECT_EQ(whole.description()["input"]["media_files"], "segments");
  const std::vector<PackPlan> sides = split_plans(whole);
  std::map<std::string, int> side_of;
  for (int side = 0; side < 2; ++side) {
    EXPECT_TRUE(sides[side].list.multi_label);
    EXPECT_EQ(sides[side].list.class_names, whole.list.class_names);
    for (const ClipEntry& c : sides[side].list.clips) {
      side_of[c.key] = side;
      EXPECT_EQ(c.classes.front(), 0);
    }
  }
  EXPECT_EQ(side_of.size(), 60u);
  EXPECT_GT(sides[1].list.clips.size(), 5u);
  EXPECT_GT(sides[0].list.clips.size(), 30u);
  // Downloaded later under other names and extensions, in another folder: each segment keeps its side.
  o.audioset.media = f.dir / "elsewhere";
  for (int i = 0; i < 60; ++i) write(o.audioset.media + "/Yvid" + std::to_string(1000 + i) + ".mkv", "");
  const std::vector<PackPlan> later = split_plans(make_plan(o));
  for (int side = 0; side < 2; ++side)
    for (const ClipEntry& c : later[side].list.clips) {
      EXPECT_EQ(side_of.at(c.key), side) << c.key;
      EXPECT_EQ(c.unreadable, "");
    }
  // The options that go with it.
  o.classes_file = f.dir / "c.txt";
  EXPECT_EQ(error_of([&] { make_plan(o); }), "--audioset-csv takes its classes from --class-index, not --classes");
  o.classes_file.clear();
  o.audioset.media.clear();
  EXPECT_EQ(error_of([&] { make_plan(o); }), "--audioset-csv needs --media DIR (the downloaded files, YTID.* or YYTID.*)");
  o.manifest = "m.csv";
  EXPECT_EQ(error_of([&] { make_plan(o); }), "pack takes one of --manifest, --tree and --audioset-csv");
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
