// The command line and the input deck (src/app/options.cpp), as avtrain's main reads them: the
// input's first line is the command line, its words split at spaces and tabs; the rest is the deck,
// written to a file whose path comes first on the command line (avtrain DECK.ini --key value ...).
#include <string>
#include <vector>

#include "app/options.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const avtrain::fuzz::Scratch scratch;
  const std::string_view text = avtrain::fuzz::as_text(data, size);
  const std::size_t end = text.find('\n');
  const std::string_view line = text.substr(0, end);
  const std::string_view deck = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  std::vector<std::string> args{scratch.write("deck.ini", deck)};
  std::string word;
  for (const char c : line) {
    if (c == ' ' || c == '\t') {
      if (!word.empty()) args.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) args.push_back(std::move(word));
  avtrain::fuzz::refusal_is_one_line([&] {
    const avtrain::ParsedOptions parsed = avtrain::parse_options(args);
    // What main does next with a parse that succeeded: the resolved options go to run.json.
    if (!parsed.help) (void)parsed.resolved.dump();
  });
  return 0;
}
