#pragma once
// The words of a fixed-choice option, once per enum. Next to an enum T sits its one table,
//   constexpr EnumNames<T, N> enum_names(T) { return {{{T::a, "a"}, {T::b, "b"}}}; }
// found by argument-dependent lookup; parse_enum reads a word through it, enum_name writes one, and
// enum_words lists them (for --help and the error that names the option).
// C++17 (no concepts): core/dtype.hpp includes it, and nvcc compiles cuda/ as C++17.
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace avtrain {

template <class T, std::size_t N>
using EnumNames = std::array<std::pair<T, const char*>, N>;

// Whether T is an enum with a table of words.
template <class T, class = void>
struct is_named_enum : std::false_type {};
template <class T>
struct is_named_enum<T, std::void_t<decltype(enum_names(std::declval<T>()))>> : std::is_enum<T> {};
template <class T>
inline constexpr bool is_named_enum_v = is_named_enum<T>::value;

template <class T, std::enable_if_t<is_named_enum_v<T>, int> = 0>
constexpr const char* enum_name(T value) {
  for (const auto& entry : enum_names(T{}))
    if (entry.first == value) return entry.second;
  return "?";
}

// The value a word names; nullopt for a word not in the table.
template <class T, std::enable_if_t<is_named_enum_v<T>, int> = 0>
constexpr std::optional<T> parse_enum(std::string_view word) {
  for (const auto& entry : enum_names(T{}))
    if (word == entry.second) return entry.first;
  return std::nullopt;
}

// The words in the table's order, separated by `separator`: "fp32, fp16, bf16".
template <class T, std::enable_if_t<is_named_enum_v<T>, int> = 0>
std::string enum_words(std::string_view separator = ", ") {
  std::string list;
  for (const auto& entry : enum_names(T{})) {
    if (!list.empty()) list += separator;
    list += entry.second;
  }
  return list;
}

}  // namespace avtrain
