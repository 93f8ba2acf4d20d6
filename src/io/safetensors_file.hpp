#pragma once
// safetensors, the weights-interchange format of the PyTorch world (huggingface/safetensors): an
// 8-byte little-endian header length N, N bytes of JSON (space-padded)
//   {NAME: {"dtype": "F32", "shape": [3, 4], "data_offsets": [BEGIN, END]}, ..., "__metadata__": {KEY: TEXT}}
// then the data: each tensor's raw little-endian row-major bytes at [BEGIN, END) of it, the tensors
// covering it exactly once, with no gap between them. The reader checks all of this when it opens a
// file and refuses a file that breaks a rule in one line naming the file and the tensor; it converts
// F32, F16, BF16 and F64 tensors to fp32. The writer writes fp32, or bf16/fp16 rounded to nearest even.
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace avtrain::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;                 // as the file spells it: "F32", "BF16", "I64", ...
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;  // bytes, from the start of the data section
  std::uint64_t elements() const;
};

class SafetensorsReader {
 public:
  // Opens PATH and checks its header against the file; throws Error naming the file (and the tensor).
  explicit SafetensorsReader(std::string path);
  const std::string& path() const { return path_; }
  // Every tensor, in the order of its data.
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }
  // The tensor of that name, or null.
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's values as fp32; a tensor of a type that is not floating (I64, BOOL, ...) is an error naming it.
  std::vector<float> floats(const SafetensorsEntry& t) const;

 private:
  void parse_header(const std::string& header, std::uint64_t data_bytes);
  void check_layout(std::uint64_t data_bytes) const;
  std::string path_;
  mutable std::ifstream in_;
  std::uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
 public:
  // The type every tensor is written in: f32, bf16 or f16 (rounded to nearest even).
  explicit SafetensorsWriter(DType dtype) : dtype_(dtype) {}
  void metadata(const std::string& key, const std::string& text) { metadata_[key] = text; }
  // Appends a tensor of shape's product values.
  void tensor(const std::string& name, const std::vector<std::uint64_t>& shape, const float* values);
  // The whole file: header length, header padded to 8 bytes, data.
  std::string bytes() const;
  // Writes bytes() to PATH through PATH.tmp and a rename.
  void write(const std::string& path) const;

 private:
  DType dtype_;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsEntry> tensors_;
  std::string data_;
};

// The word safetensors uses for a DType: "F32", "F16", "BF16".
const char* safetensors_dtype(DType dtype);

}  // namespace avtrain::io
