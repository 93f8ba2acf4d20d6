#pragma once
// A multi-label shard's /labels (format v2, docs/shard-format.md): uint8 [N, classes], 1 for each
// class of a sample's set and 0 elsewhere; every sample holds at least one class.
#include <cstdint>
#include <string>
#include <vector>

namespace avtrain::data {

// Throws Error naming the file, "/labels", the row (first_row + r) and what is wrong for a value other
// than 0 or 1 or a row without a class; `suffix` ends the message (" (refused by the writer)"). Adds
// each row's classes to histogram (classes counts) where it is not null.
void check_label_sets(const std::string& path, std::int64_t first_row, const std::uint8_t* labels, std::int64_t rows,
                      int classes, const char* suffix, std::vector<std::int64_t>* histogram = nullptr);

// The first class of each row's set (the row's `label` in a MicroBatch); -1 for a row without one.
std::vector<std::int32_t> first_classes(const std::uint8_t* labels, std::int64_t rows, int classes);

}  // namespace avtrain::data
