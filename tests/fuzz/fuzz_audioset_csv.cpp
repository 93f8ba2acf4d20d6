// AudioSet's CSV files as `avtrain-shards pack --audioset-csv SEGMENTS --class-index INDEX --media DIR`
// reads them (src/pack/audioset_csv.cpp): the input up to a line `%%` is the class index
// (class_labels_indices.csv), what follows it the segments file (balanced_train_segments.csv, quoted
// label lists); the media folder holds a few files named by YouTube ids (YTID.* and YYTID.*). Odd
// input sizes read the files as whole videos (--media-files videos), even ones as segments alone.
#include "fuzz_input.hpp"
#include "pack/audioset_csv.hpp"

namespace {

// The media folder: a few files named by YouTube ids (one in a sub-folder), a hidden file and an
// unfinished download, which the lookup skips.
std::string media_folder(const avtrain::fuzz::Scratch& scratch) {
  const std::filesystem::path dir = scratch.path() / "media";
  std::filesystem::create_directories(dir / "sub");
  for (const char* name : {"--PJHxphWEs.wav", "Y--ZhevVpy1s.mp4", "sub/-0RWZT-miFs.webm", ".hidden", "abc.part"})
    std::ofstream(dir / name).put('x');
  return dir.string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const avtrain::fuzz::Scratch scratch;
  const avtrain::fuzz::Parts parts = avtrain::fuzz::split_at_line(avtrain::fuzz::as_text(data, size), "%%");
  avtrain::pack::AudiosetInput input;
  input.class_index = scratch.write("class_labels_indices.csv", parts.first);
  input.segments = scratch.write("segments.csv", parts.second);
  input.media = media_folder(scratch);
  input.whole_videos = size % 2 == 1;
  avtrain::fuzz::refusal_is_one_line([&] {
    const avtrain::pack::ClipList list = avtrain::pack::read_audioset(input);
    for (const avtrain::pack::ClipEntry& clip : list.clips) {
      for (std::size_t i = 0; i < clip.classes.size(); ++i)
        if (clip.classes[i] < 0 || std::size_t(clip.classes[i]) >= list.class_names.size() ||
            (i > 0 && clip.classes[i] <= clip.classes[i - 1])) {
          std::fprintf(stderr, "fuzz: %s:%lld: class place %d outside the index of %zu or out of order\n",
                       input.segments.c_str(), static_cast<long long>(clip.line), clip.classes[i],
                       list.class_names.size());
          std::abort();
        }
      if (!(clip.duration > 0)) {
        std::fprintf(stderr, "fuzz: %s:%lld: a segment of %g s\n", input.segments.c_str(),
                     static_cast<long long>(clip.line), clip.duration);
        std::abort();
      }
    }
  });
  return 0;
}
