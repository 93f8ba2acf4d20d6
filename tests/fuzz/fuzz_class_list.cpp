// The class list of `avtrain-shards pack --classes FILE` (src/pack/clip_list.cpp, read_class_file):
// the input is the file.
#include "fuzz_input.hpp"
#include "pack/clip_list.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const avtrain::fuzz::Scratch scratch;
  const std::string path = scratch.write("classes.txt", avtrain::fuzz::as_text(data, size));
  avtrain::fuzz::refusal_is_one_line([&] {
    const std::vector<std::string> names = avtrain::pack::read_class_file(path);
    // What the pack does with it next: each name's place.
    (void)avtrain::pack::places_of(names);
  });
  return 0;
}
