// The CSV manifest of `avtrain-shards pack --manifest FILE [--classes FILE]` (src/pack/clip_list.cpp),
// read as the pack's plan reads it (src/pack/pack_plan.cpp): the input up to a line `%%` is the class
// list (read first, as --classes), what follows it the manifest; without that line the input is the
// manifest alone (the classes then come from its labels).
#include "fuzz_input.hpp"
#include "pack/clip_list.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const avtrain::fuzz::Scratch scratch;
  const avtrain::fuzz::Parts parts = avtrain::fuzz::split_at_line(avtrain::fuzz::as_text(data, size), "%%");
  const std::string manifest = scratch.write("manifest.csv", parts.second);
  const std::string classes = parts.found ? scratch.write("classes.txt", parts.first) : std::string();
  avtrain::fuzz::refusal_is_one_line([&] {
    const std::vector<std::string> names =
        classes.empty() ? std::vector<std::string>{} : avtrain::pack::read_class_file(classes);
    const avtrain::pack::ClipList list = avtrain::pack::read_manifest(manifest, names);
    // The list's promise: every readable clip's classes are places in its class list, ascending.
    for (const avtrain::pack::ClipEntry& clip : list.clips) {
      if (!clip.unreadable.empty()) continue;
      for (std::size_t i = 0; i < clip.classes.size(); ++i)
        if (clip.classes[i] < 0 || std::size_t(clip.classes[i]) >= list.class_names.size() ||
            (i > 0 && clip.classes[i] <= clip.classes[i - 1])) {
          std::fprintf(stderr, "fuzz: %s:%lld: class place %d outside the list of %zu or out of order\n",
                       manifest.c_str(), static_cast<long long>(clip.line), clip.classes[i], list.class_names.size());
          std::abort();
        }
    }
  });
  return 0;
}
