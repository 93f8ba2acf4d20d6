// A shard file of format v1 or v2, as a run opens its set (src/data/shard_set.cpp, shard_reader.cpp):
// the input is one file, `shard-000.h5` of a set's folder. The set is opened (every attribute, type,
// shape and filter checked, then the values: the full check for odd input sizes, the sampled one a start
// makes by default for even ones), its datasets' layouts described (avtrain-shards inspect), and
// micro-batches read as training reads them: all fields of the first rows, the last row, and the labels
// alone (a last pipeline stage's read). The file is opened by its path, as a user's is, so the reader's
// own open (H5Fopen, the default driver) is what runs; validation/fuzz-campaign.sh puts the scratch
// folder in memory (/dev/shm) so that the write and the open cost no disk. Beside libFuzzer's byte
// mutations, the fuzz preset changes single values of the file through HDF5 (hdf5_value_mutator.cpp).
#include <algorithm>
#include <memory>

#include "data/shard_reader.hpp"
#include "data/shard_set.hpp"
#include "fuzz_input.hpp"
#include "hdf5_value_mutator.hpp"

namespace {

// What a micro-batch read must hold: every field of its shape, lengths and labels in range, float
// audio in [-1, 1] (the reader's promise: no value out of range is ever trained on).
void require_batch(const avtrain::data::SetInfo& set, const avtrain::data::MicroBatch& batch, bool all) {
  const auto rows = static_cast<std::size_t>(batch.size);
  const auto fail = [](const char* what) {
    std::fprintf(stderr, "fuzz: a micro-batch read holds %s\n", what);
    std::abort();
  };
  if (batch.label.size() != rows) fail("a label count other than its rows");
  for (const std::int32_t label : batch.label)
    if (label < 0 || label >= set.num_classes) fail("a label outside the classes");
  if (set.multi_label && batch.labels.size() != rows * std::size_t(set.num_classes)) fail("a /labels size other than its rows");
  if (!all) return;
  if (batch.audio.size() != rows * std::size_t(set.audio_samples)) fail("an audio size other than its rows");
  for (const float v : batch.audio)
    if (!(v >= -1.0f && v <= 1.0f)) fail("audio outside [-1, 1]");
  for (std::size_t r = 0; r < rows; ++r) {
    if (batch.audio_len[r] < 1 || batch.audio_len[r] > set.audio_samples) fail("an audio length out of range");
    if (batch.video_len[r] < 1 || batch.video_len[r] > set.frames) fail("a video length out of range");
  }
}

}  // namespace

// The input is one HDF5 file (the fuzz preset changes its values with hdf5_value_mutator.cpp).
std::vector<std::string_view> avtrain::fuzz::hdf5_files_of(std::string_view input) { return {input}; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const avtrain::fuzz::Scratch scratch;
  std::filesystem::create_directory(scratch.path() / "set");
  const std::string path = scratch.write("set/shard-000.h5", avtrain::fuzz::as_text(data, size));
  const avtrain::data::CheckValues values =
      size % 2 == 1 ? avtrain::data::CheckValues::full : avtrain::data::CheckValues::sample;
  avtrain::fuzz::refusal_is_one_line([&] {
    const std::unique_ptr<avtrain::data::ShardSet> set =
        avtrain::data::ShardSet::open((scratch.path() / "set").string(), {0, 1, values});
    const avtrain::data::SetInfo& info = set->info();
    for (const avtrain::data::DatasetLayout& layout : avtrain::data::ShardReader(path).layouts())
      (void)layout.name.size();
    const std::int64_t samples = info.total_samples;
    std::vector<std::int64_t> first;  // the first rows, a row twice, and the last
    for (std::int64_t i = 0; i < std::min<std::int64_t>(samples, 3); ++i) first.push_back(i);
    first.push_back(0);
    first.push_back(samples - 1);
    require_batch(info, set->read(first, avtrain::data::Fields::all), true);
    require_batch(info, set->read({samples - 1, 0}, avtrain::data::Fields::labels), false);
  });
  return 0;
}
