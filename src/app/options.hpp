#pragma once
// Command line and input deck, through Boost.Program_options. Every deck key is also a command-line
// option of the same dotted name (--train.steps 10); the command line wins. Unknown keys are errors.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/run_config.hpp"

namespace avtrain {

struct ParsedOptions {
  RunConfig config;
  nlohmann::json resolved;  // every option with its final value, defaults included
  std::optional<std::string> help;  // set when --help was asked: the text to print
};

// Throws Error naming the option or deck key at fault.
ParsedOptions parse_options(const std::vector<std::string>& args);

}  // namespace avtrain
