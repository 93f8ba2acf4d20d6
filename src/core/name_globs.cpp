#include "core/name_globs.hpp"

#include <fnmatch.h>

#include <sstream>

namespace avtrain {

NameGlobs::NameGlobs(const std::string& list) {
  std::istringstream in(list);
  for (std::string g; std::getline(in, g, ',');) {
    const auto first = g.find_first_not_of(" \t"), last = g.find_last_not_of(" \t");
    if (first != std::string::npos) globs_.push_back(g.substr(first, last - first + 1));
  }
  used_.assign(globs_.size(), false);
}

bool NameGlobs::match(const std::string& name) {
  bool any = false;
  for (std::size_t i = 0; i < globs_.size(); ++i)
    if (fnmatch(globs_[i].c_str(), name.c_str(), 0) == 0) used_[i] = any = true;
  return any;
}

}  // namespace avtrain
