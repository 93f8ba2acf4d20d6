#pragma once
// Text read from a user's file (a tensor or class name, an attribute's value, a dtype) as a refusal
// shows it: on one line, each control character (a line break, a tab, ...) written as \xNN, so the
// message main prints stays the one line it promises.
#include <string>

namespace avtrain {

std::string one_line(const std::string& text);

}  // namespace avtrain
