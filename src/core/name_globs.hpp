#pragma once
// A comma-separated list of fnmatch(3) globs over parameter or module names ("head.cls.*, embed.pos"),
// as options take them, and which of them matched something.
#include <string>
#include <vector>

namespace avtrain {

class NameGlobs {
 public:
  explicit NameGlobs(const std::string& list);
  // Whether some glob matches `name`; each glob that does is marked as used.
  bool match(const std::string& name);
  const std::vector<std::string>& globs() const { return globs_; }
  // Per glob, in list order: whether it has matched a name.
  const std::vector<bool>& used() const { return used_; }
  bool empty() const { return globs_.empty(); }

 private:
  std::vector<std::string> globs_;
  std::vector<bool> used_;
};

}  // namespace avtrain
