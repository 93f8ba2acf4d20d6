#pragma once
// One checkpoint file in HDF5, readable with h5py: fp32 tensors and scalars as datasets named by
// slash-separated paths ("params/blocks.3.attn.qkv.weight", "scaler/scale"), text attributes on
// the root, and the format version. A tensor may also be held in pieces, each a file's dataset of
// that name (a ZeRO replica's part): a piece is one-dimensional, its elements a run of the whole's
// in row-major order, with the attributes `offset` (where the run starts) and `shape` (the whole's). Every dataset is chunked with HDF5's Fletcher-32 checksum,
// which HDF5 verifies on every read (h5py's too), so a changed byte is an error, never a value.
// A file is built in memory (HDF5's core driver, in a FileImage that can be kept from one file to
// the next) and only reaches the disk on commit(): written to PATH.tmp in one pass (O_DIRECT where
// the file system takes it: the page cache is what makes buffered writes slow and erratic),
// fsynced, renamed to PATH, and the directory fsynced; a writer destroyed before commit() leaves
// nothing. Every HDF5 call holds data::hdf5_mutex(): a writer may run on a thread of its own.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/host_memory.hpp"
#include "data/hdf5_id.hpp"

namespace avtrain::checkpoint {

inline constexpr std::int64_t kFormatVersion = 1;

class FileWriter {
 public:
  // image: the memory to build the file in (kept by the caller for the next file); null: its own.
  explicit FileWriter(std::string path, FileImage* image = nullptr);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // host holds the product of shape's values; a name's groups are created as needed.
  void tensor(const std::string& name, const std::vector<std::uint64_t>& shape, const float* host);
  // The `count` values of tensor `name` (of `shape`) from flat element `offset` on: a piece.
  void piece(const std::string& name, const std::vector<std::uint64_t>& shape, std::uint64_t offset,
             std::uint64_t count, const float* host);
  void scalar(const std::string& name, std::int64_t value);
  void scalar(const std::string& name, double value);
  void attribute(const std::string& name, const std::string& value);
  // Writes PATH.tmp, fsyncs it and renames it to PATH; the file is complete once this returns.
  // before_rename (a test's hold, debug.hold_checkpoint): called once PATH.tmp is written whole.
  void commit(const std::function<void()>& before_rename = {});
  const std::string& path() const { return path_; }

 private:
  // Returns the dataset, open, for attributes.
  data::H5Id dataset(const std::string& name, hid_t file_type, hid_t mem_type, const std::vector<std::uint64_t>& shape,
                     const void* host);
  std::string path_, tmp_;
  FileImage own_image_;
  FileImage& image_;
  data::H5Id file_;
  bool committed_ = false;
};

// Where a piece lies in its tensor.
struct Piece {
  std::uint64_t offset = 0;             // its first element in the whole, row-major
  std::vector<std::uint64_t> shape;     // the whole tensor's shape
};

class FileReader {
 public:
  // Opens PATH and checks its format version; throws Error naming the file.
  explicit FileReader(std::string path);

  bool has(const std::string& name) const;
  // The datasets directly under a group, in name order ("" is the root).
  std::vector<std::string> names(const std::string& group) const;
  std::vector<std::uint64_t> shape(const std::string& name) const;
  // Where dataset `name` lies in its tensor when it is a piece; nullopt when it is the whole.
  std::optional<Piece> piece(const std::string& name) const;
  // Reads a tensor of `count` values (its shape's product must match); throws Error naming the
  // file and the dataset when it is missing, of another size, or fails its checksum.
  void tensor(const std::string& name, float* host, std::size_t count) const;
  std::int64_t int_scalar(const std::string& name) const;
  double real_scalar(const std::string& name) const;
  std::string attribute(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  data::H5Id open(const std::string& name) const;
  void read(const std::string& name, hid_t mem_type, void* host, std::size_t count) const;
  std::string path_;
  data::H5Id file_;
};

}  // namespace avtrain::checkpoint
