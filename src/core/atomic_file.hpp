#pragma once
// Writing a whole file so that a reader sees the old one or the new one, never half of either.
#include <string>

namespace avtrain {

// Writes text to path through path.tmp, fsync and a rename (the directory fsynced after), so a
// reader never sees half a file and a crash after the return loses nothing.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace avtrain
