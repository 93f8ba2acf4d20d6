// A safetensors file, as --init_from reads one (src/io/safetensors_file.cpp): the input is the file;
// it is opened (header and layout checked), then every tensor is looked up by name and read as fp32
// (a tensor that is not floating is refused by itself, as init_from refuses it) and the metadata read.
#include "fuzz_input.hpp"
#include "io/safetensors_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const avtrain::fuzz::Scratch scratch;
  const std::string path = scratch.write("weights.safetensors", avtrain::fuzz::as_text(data, size));
  avtrain::fuzz::refusal_is_one_line([&] {
    const avtrain::io::SafetensorsReader file(path);
    for (const auto& [key, text] : file.metadata()) (void)(key.size() + text.size());
    for (const avtrain::io::SafetensorsEntry& t : file.tensors()) {
      const avtrain::io::SafetensorsEntry* found = file.find(t.name);
      if (found == nullptr) {
        std::fprintf(stderr, "fuzz: tensor %s listed but not found by name\n", t.name.c_str());
        std::abort();
      }
      avtrain::fuzz::refusal_is_one_line([&] {
        const std::vector<float> values = file.floats(*found);
        if (values.size() != found->elements()) {
          std::fprintf(stderr, "fuzz: tensor %s: %zu values read, its shape holds %llu\n", t.name.c_str(),
                       values.size(), static_cast<unsigned long long>(found->elements()));
          std::abort();
        }
      });
    }
  });
  return 0;
}
