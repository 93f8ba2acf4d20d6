#include "io/safetensors_file.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/one_line.hpp"
#include "core/half.hpp"

namespace avtrain::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian, as this host must be");

namespace {

// The header may not exceed what the safetensors package reads (its MAX_HEADER_SIZE).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// Every dtype of the format and the bytes of one element.
constexpr std::array<std::pair<std::string_view, std::uint64_t>, 15> kDTypes{{
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8}}};

// Bytes per element of a dtype; 0 when the format has no such dtype.
std::uint64_t element_bytes(const std::string& dtype) {
  for (const auto& [name, bytes] : kDTypes)
    if (name == dtype) return bytes;
  return 0;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The bytes of a tensor of that shape and element size; none when they do not fit 64 bits (a shape
// whose product wraps around would pass for a small tensor and then be read as a huge one).
std::optional<std::uint64_t> shape_bytes(const std::vector<std::uint64_t>& shape, std::uint64_t element) {
  if (std::find(shape.begin(), shape.end(), std::uint64_t(0)) != shape.end()) return 0;
  std::uint64_t bytes = element;
  for (const std::uint64_t d : shape)
    if (__builtin_mul_overflow(bytes, d, &bytes)) return std::nullopt;
  return bytes;
}

std::string bytes_text(const SafetensorsEntry& t) {
  return "bytes " + std::to_string(t.begin) + ".." + std::to_string(t.end);
}

}  // namespace

std::uint64_t SafetensorsEntry::elements() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;
  return n;
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  in_.open(path_, std::ios::binary);
  require(bool(in_), path_ + ": cannot open: " + std::strerror(errno));
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path_, ec);
  require(!ec, path_ + ": cannot read its size: " + ec.message());
  require(size >= 8, path_ + ": " + std::to_string(size) +
                         " bytes, too short for the 8-byte header length of a safetensors file (truncated?)");
  unsigned char le[8];
  in_.read(reinterpret_cast<char*>(le), 8);
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | le[i];
  require(header_bytes <= size - 8, path_ + ": its header length " + std::to_string(header_bytes) +
                                        " runs past the end of the file (" + std::to_string(size) +
                                        " bytes; truncated, or not a safetensors file?)");
  require(header_bytes <= kMaxHeaderBytes, path_ + ": its header length " + std::to_string(header_bytes) +
                                               " is over safetensors' limit of " + std::to_string(kMaxHeaderBytes));
  std::string header(header_bytes, '\0');
  in_.read(header.data(), std::streamsize(header_bytes));
  require(bool(in_), path_ + ": cannot read its header");
  data_start_ = 8 + header_bytes;
  parse_header(header, size - data_start_);
  check_layout(size - data_start_);
}

void SafetensorsReader::parse_header(const std::string& header, std::uint64_t data_bytes) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path_ + ": its header is not JSON (" + e.what() + ")");
  }
  require(j.is_object(), path_ + ": its header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      require(it->is_object(), path_ + ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        require(m->is_string(), path_ + ": __metadata__ " + one_line(m.key()) + " is not a string");
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string where = path_ + ": tensor " + one_line(name);
    const nlohmann::json& e = *it;
    require(e.is_object(), where + ": not an object");
    require(e.contains("dtype") && e["dtype"].is_string(), where + ": no dtype");
    require(e.contains("shape") && e["shape"].is_array(), where + ": no shape");
    require(e.contains("data_offsets") && e["data_offsets"].is_array() && e["data_offsets"].size() == 2,
            where + ": no data_offsets [begin, end]");
    SafetensorsEntry t;
    t.name = name;
    t.dtype = e["dtype"].get<std::string>();
    const std::uint64_t size = element_bytes(t.dtype);
    require(size != 0, where + ": unknown dtype '" + one_line(t.dtype) + "'");
    for (const nlohmann::json& d : e["shape"]) {
      require(d.is_number_unsigned(), where + ": its shape " + e["shape"].dump() + " is not a list of sizes");
      t.shape.push_back(d.get<std::uint64_t>());
    }
    for (const nlohmann::json& o : e["data_offsets"])
      require(o.is_number_unsigned(), where + ": its data_offsets " + e["data_offsets"].dump() + " are not byte offsets");
    t.begin = e["data_offsets"][0].get<std::uint64_t>();
    t.end = e["data_offsets"][1].get<std::uint64_t>();
    require(t.begin <= t.end, where + ": its data_offsets " + e["data_offsets"].dump() + " end before they begin");
    const std::optional<std::uint64_t> need = shape_bytes(t.shape, size);
    require(need.has_value(), where + ": its dtype " + t.dtype + " and shape " + shape_text(t.shape) +
                                  " need more than 2^64 bytes");
    require(t.end - t.begin == *need,
            where + ": its data_offsets " + e["data_offsets"].dump() + " hold " + std::to_string(t.end - t.begin) +
                " bytes, its dtype " + t.dtype + " and shape " + shape_text(t.shape) + " need " + std::to_string(*need));
    require(t.end <= data_bytes, where + ": its data ends at byte " + std::to_string(t.end) + " of a data section of " +
                                     std::to_string(data_bytes) + " bytes (a truncated file?)");
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
}

void SafetensorsReader::check_layout(std::uint64_t data_bytes) const {
  std::uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& t : tensors_) {
    require(t.begin >= covered, path_ + ": tensor " + one_line(t.name) + " (" + bytes_text(t) + ") overlaps tensor " +
                                    (previous ? one_line(previous->name) + " (" + bytes_text(*previous) + ")" : std::string()));
    require(t.begin == covered, path_ + ": tensor " + one_line(t.name) + " (" + bytes_text(t) + ") leaves a gap of " +
                                    std::to_string(t.begin - covered) + " bytes before it");
    covered = t.end;
    previous = &t;
  }
  require(covered == data_bytes, path_ + ": the data section has " + std::to_string(data_bytes - covered) +
                                     " bytes after its last tensor" + (previous ? " (" + one_line(previous->name) + ")" : "") +
                                     " that no tensor holds");
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  for (const SafetensorsEntry& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<float> SafetensorsReader::floats(const SafetensorsEntry& t) const {
  const std::uint64_t n = t.elements();
  if (n == 0 && (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "F64"))
    return {};  // an empty tensor (a 0 in its shape): nothing to read, and nothing to copy from a null data()
  std::vector<char> raw(t.end - t.begin);
  in_.clear();
  in_.seekg(std::streamoff(data_start_ + t.begin));
  in_.read(raw.data(), std::streamsize(raw.size()));
  require(bool(in_), path_ + ": tensor " + one_line(t.name) + ": cannot read its data");
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), raw.data(), raw.size());
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    std::vector<std::uint16_t> bits(n);
    std::memcpy(bits.data(), raw.data(), raw.size());
    if (t.dtype == "F16") half_to_floats(bits.data(), out.data(), n);
    else bf16_to_floats(bits.data(), out.data(), n);
  } else if (t.dtype == "F64") {
    std::vector<double> wide(n);
    std::memcpy(wide.data(), raw.data(), raw.size());
    std::transform(wide.begin(), wide.end(), out.begin(), [](double x) { return float(x); });
  } else {
    throw Error(path_ + ": tensor " + one_line(t.name) + ": dtype " + t.dtype + " is not a floating type (F32, F16, BF16, F64)");
  }
  return out;
}

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::e4m3:
    case DType::e5m2: break;  // an export is fp32, fp16 or bf16 (its option's words)
  }
  return "";
}

void SafetensorsWriter::tensor(const std::string& name, const std::vector<std::uint64_t>& shape, const float* values) {
  require(!is_fp8(dtype_), "internal: SafetensorsWriter writes fp32, fp16 or bf16, not " + std::string(dtype_name(dtype_)));
  SafetensorsEntry t{name, safetensors_dtype(dtype_), shape, data_.size(), 0};
  const std::uint64_t n = t.elements();
  if (dtype_ == DType::f32) {
    data_.append(reinterpret_cast<const char*>(values), n * sizeof(float));
  } else {
    std::vector<std::uint16_t> bits(n);
    if (dtype_ == DType::bf16) floats_to_bf16(values, bits.data(), n);
    else floats_to_half(values, bits.data(), n);
    data_.append(reinterpret_cast<const char*>(bits.data()), n * sizeof(std::uint16_t));
  }
  t.end = data_.size();
  tensors_.push_back(std::move(t));
}

std::string SafetensorsWriter::bytes() const {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  for (const SafetensorsEntry& t : tensors_)
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the Python package writes
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char(std::uint64_t(text.size()) >> (8 * i) & 0xff);
  return out + text + data_;
}

void SafetensorsWriter::write(const std::string& path) const { write_file_atomically(path, bytes()); }

}  // namespace avtrain::io
