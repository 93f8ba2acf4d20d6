#pragma once
// What every fuzz target shares: the input written where the reader under test expects a file, and
// the one outcome of a bad input that is not a finding, avtrain::Error with a one-line message.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "../data/temp_dir.hpp"
#include "core/error.hpp"

namespace avtrain::fuzz {

// The scratch folder of one input (test::TempDir): made when the input starts, removed with all it
// holds when the input is done (libFuzzer may end the process without running static destructors,
// so nothing is left for the end). A crash leaves it, with libFuzzer's file of the input that crashed.
class Scratch {
 public:
  const std::filesystem::path& path() const { return dir_.path(); }

  // Writes BYTES to the file NAME of the folder and returns its path.
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::filesystem::path file = dir_.path() / name;
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", file.c_str());
      std::abort();
    }
    return file.string();
  }

 private:
  test::TempDir dir_;
};

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// TEXT cut at the first line that is exactly SEPARATOR: what comes before it and what comes after it;
// no such line: {"", TEXT}, found = false.
struct Parts {
  std::string_view first, second;
  bool found = false;
};
inline Parts split_at_line(std::string_view text, std::string_view separator) {
  const std::string line = std::string(separator) + "\n";
  if (text.substr(0, line.size()) == line) return {{}, text.substr(line.size()), true};
  const std::size_t at = text.find("\n" + line);
  if (at == std::string_view::npos) return {{}, text, false};
  return {text.substr(0, at + 1), text.substr(at + 1 + line.size()), true};
}

// Runs read(): it may succeed, or refuse the input with avtrain::Error whose message is one non-empty
// line (what main prints). Any other exception escapes (std::terminate: a finding); a refusal that is
// empty or runs over several lines aborts (a finding). AVTRAIN_FUZZ_SHOW=1 prints each outcome.
template <class Read>
void refusal_is_one_line(Read read) {
  static const bool show = std::getenv("AVTRAIN_FUZZ_SHOW") != nullptr;
  try {
    read();
    if (show) std::fprintf(stderr, "fuzz: accepted\n");
  } catch (const avtrain::Error& e) {
    if (show) std::fprintf(stderr, "fuzz: refused: %s\n", e.what());
    const std::string_view message = e.what();
    if (message.empty() || message.find('\n') != std::string_view::npos) {
      std::fprintf(stderr, "fuzz: the refusal is not one line:\n%s\n", e.what());
      std::abort();
    }
  }
}

}  // namespace avtrain::fuzz
