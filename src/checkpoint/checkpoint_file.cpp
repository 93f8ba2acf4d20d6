#include "checkpoint/checkpoint_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "data/hdf5_file_format.hpp"

namespace avtrain::checkpoint {
namespace {

using data::H5Id;

constexpr std::size_t kChunkBytes = std::size_t(16) << 20;  // at most 16 MiB per checksummed chunk

// Makes a directory's entries (a rename into it) durable.
void fsync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw Error("checkpoint " + path + ": cannot open to fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error("checkpoint " + path + ": fsync failed: " + std::strerror(err));
}

std::string parent_of(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

// ---------------------------------------------------------------- writing

namespace {

// HDF5's core driver keeps the file in memory that these callbacks give it: the FileImage (udata).
// Nothing is freed when the file closes; the image outlives it.
void* image_malloc(std::size_t size, H5FD_file_image_op_t, void* image) {
  static_cast<FileImage*>(image)->reserve(size);
  return static_cast<FileImage*>(image)->data();
}
void* image_realloc(void*, std::size_t size, H5FD_file_image_op_t op, void* image) {
  return image_malloc(size, op, image);
}
void* image_memcpy(void* dest, const void* src, std::size_t size, H5FD_file_image_op_t, void*) {
  return std::memcpy(dest, src, size);
}
herr_t image_free(void*, H5FD_file_image_op_t, void*) { return 0; }
void* udata_copy(void* image) { return image; }
herr_t udata_free(void*) { return 0; }

constexpr std::size_t kImageIncrement = std::size_t(16) << 20;

}  // namespace

FileWriter::FileWriter(std::string path, FileImage* image)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), image_(image ? *image : own_image_) {
  const std::lock_guard lock(data::hdf5_mutex());
  data::silence_hdf5_error_printing();
  const H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5FD_file_image_callbacks_t callbacks = {image_malloc, image_memcpy, image_realloc, image_free,
                                           udata_copy,   udata_free,   &image_};
  require(fapl.valid() && H5Pset_fapl_core(fapl.get(), kImageIncrement, false) >= 0 &&
              H5Pset_file_image_callbacks(fapl.get(), &callbacks) >= 0 && data::use_checksummed_metadata(fapl.get()),
          "checkpoint " + path_ + ": cannot set up HDF5's in-memory file");
  const H5Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  require(fcpl.valid() && data::record_no_times(fcpl.get()), "checkpoint " + path_ + ": cannot set up HDF5's file format");
  file_ = H5Id(H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose);
  require(file_.valid(), "checkpoint " + tmp_ + ": cannot create");
  const H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  const H5Id attr(H5Acreate2(file_.get(), "format_version", H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                  H5Aclose);
  require(attr.valid() && H5Awrite(attr.get(), H5T_NATIVE_INT64, &kFormatVersion) >= 0,
          "checkpoint " + tmp_ + ": cannot write the format version");
}

FileWriter::~FileWriter() {
  if (committed_) return;
  file_.reset();
  std::remove(tmp_.c_str());
}

H5Id FileWriter::dataset(const std::string& name, hid_t file_type, hid_t mem_type,
                         const std::vector<std::uint64_t>& shape, const void* host) {
  const std::lock_guard lock(data::hdf5_mutex());
  const std::string where = "checkpoint " + tmp_ + ": dataset " + name;
  require(!committed_, where + ": written after commit");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hsize_t count = 1;
  for (hsize_t d : dims) count *= d;
  require(!dims.empty() && count > 0, where + ": empty shape");
  // Chunks of the whole tensor, halved along the largest dimension while over kChunkBytes.
  std::vector<hsize_t> chunk = dims;
  const std::size_t element = H5Tget_size(mem_type);
  auto chunk_bytes = [&] {
    std::size_t n = element;
    for (hsize_t c : chunk) n *= std::size_t(c);
    return n;
  };
  while (chunk_bytes() > kChunkBytes) {
    auto largest = std::max_element(chunk.begin(), chunk.end());
    *largest = (*largest + 1) / 2;
  }
  const H5Id space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  const H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  require(space.valid() && dcpl.valid() && lcpl.valid() &&
              H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data()) >= 0 &&
              H5Pset_fletcher32(dcpl.get()) >= 0 && data::record_no_times(dcpl.get()) &&
              H5Pset_create_intermediate_group(lcpl.get(), 1) >= 0,
          where + ": cannot set up");
  H5Id dset(H5Dcreate2(file_.get(), name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
            H5Dclose);
  require(dset.valid(), where + ": cannot create (a name written twice?)");
  require(H5Dwrite(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, host) >= 0, where + ": cannot write");
  return dset;
}

void FileWriter::tensor(const std::string& name, const std::vector<std::uint64_t>& shape, const float* host) {
  dataset(name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, shape, host);
}

namespace {

// An int64 attribute of `count` values on `object` (count 0: a scalar of one).
bool write_int_attribute(hid_t object, const char* name, const std::uint64_t* values, hsize_t count) {
  const H5Id space(count ? H5Screate_simple(1, &count, nullptr) : H5Screate(H5S_SCALAR), H5Sclose);
  const H5Id attr(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  return space.valid() && attr.valid() && H5Awrite(attr.get(), H5T_NATIVE_UINT64, values) >= 0;
}

}  // namespace

void FileWriter::piece(const std::string& name, const std::vector<std::uint64_t>& shape, std::uint64_t offset,
                       std::uint64_t count, const float* host) {
  const H5Id dset = dataset(name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {count}, host);
  const std::lock_guard lock(data::hdf5_mutex());
  require(write_int_attribute(dset.get(), "offset", &offset, 0) &&
              write_int_attribute(dset.get(), "shape", shape.data(), shape.size()),
          "checkpoint " + tmp_ + ": dataset " + name + ": cannot write where the piece lies");
}

void FileWriter::scalar(const std::string& name, std::int64_t value) {
  dataset(name, H5T_STD_I64LE, H5T_NATIVE_INT64, {1}, &value);
}

void FileWriter::scalar(const std::string& name, double value) {
  dataset(name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {1}, &value);
}

void FileWriter::attribute(const std::string& name, const std::string& value) {
  const std::lock_guard lock(data::hdf5_mutex());
  const std::string where = "checkpoint " + tmp_ + ": attribute " + name;
  const H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  const H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  require(type.valid() && H5Tset_size(type.get(), std::max<std::size_t>(1, value.size())) >= 0 &&
              H5Tset_strpad(type.get(), H5T_STR_NULLPAD) >= 0,
          where + ": cannot set up");
  const H5Id attr(H5Acreate2(file_.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  require(attr.valid() && H5Awrite(attr.get(), type.get(), padded.data()) >= 0, where + ": cannot write");
}

void FileWriter::commit(const std::function<void()>& before_rename) {
  require(!committed_, "checkpoint " + path_ + ": committed twice");
  ssize_t size = -1;
  {
    const std::lock_guard lock(data::hdf5_mutex());
    // A flush releases what HDF5 had set aside at the end of the file: the image is then complete
    // and its size is the file's.
    if (H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) >= 0) size = H5Fget_file_image(file_.get(), nullptr, 0);
    file_.reset();
  }
  require(size > 0, "checkpoint " + tmp_ + ": cannot flush the in-memory file");
  write_image(tmp_, image_, std::size_t(size));
  if (before_rename) before_rename();
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) throw Error("checkpoint " + tmp_ + ": cannot rename to " + path_ + ": " + ec.message());
  committed_ = true;
  fsync_directory(parent_of(path_));
}

// ---------------------------------------------------------------- reading

FileReader::FileReader(std::string path) : path_(std::move(path)) {
  const std::lock_guard lock(data::hdf5_mutex());
  data::silence_hdf5_error_printing();
  require(std::filesystem::is_regular_file(path_), "checkpoint " + path_ + ": no such file");
  file_ = H5Id(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  require(file_.valid(), "checkpoint " + path_ + ": not a readable HDF5 file (truncated or damaged)");
  std::int64_t version = -1;
  if (H5Aexists(file_.get(), "format_version") > 0) {
    const H5Id attr(H5Aopen(file_.get(), "format_version", H5P_DEFAULT), H5Aclose);
    if (!attr.valid() || H5Aread(attr.get(), H5T_NATIVE_INT64, &version) < 0) version = -1;
  }
  require(version >= 0, "checkpoint " + path_ + ": no format_version attribute (not an avtrain checkpoint)");
  require(version == kFormatVersion, "checkpoint " + path_ + ": format version " + std::to_string(version) +
                                         ", this build reads version " + std::to_string(kFormatVersion));
}

bool FileReader::has(const std::string& name) const {
  const std::lock_guard lock(data::hdf5_mutex());
  // H5Lexists needs every group on the way to exist.
  for (std::size_t slash = name.find('/'); ; slash = name.find('/', slash + 1)) {
    const std::string prefix = name.substr(0, slash);
    if (prefix.empty() || H5Lexists(file_.get(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) return true;
  }
}

std::vector<std::string> FileReader::names(const std::string& group) const {
  const std::lock_guard lock(data::hdf5_mutex());
  const std::string where = group.empty() ? "/" : group;
  require(group.empty() || has(group), "checkpoint " + path_ + ": no group " + where);
  const H5Id g(H5Gopen2(file_.get(), where.c_str(), H5P_DEFAULT), H5Gclose);
  H5G_info_t info;
  require(g.valid() && H5Gget_info(g.get(), &info) >= 0, "checkpoint " + path_ + ": group " + where + " unreadable");
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    require(n >= 0, "checkpoint " + path_ + ": group " + where + " unreadable");
    std::string name(std::size_t(n), '\0');
    H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), std::size_t(n) + 1, H5P_DEFAULT);
    out.push_back(std::move(name));
  }
  return out;
}

H5Id FileReader::open(const std::string& name) const {
  const std::lock_guard lock(data::hdf5_mutex());
  require(has(name), "checkpoint " + path_ + ": dataset " + name + " missing");
  H5Id dset(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  require(dset.valid(), "checkpoint " + path_ + ": dataset " + name + " unreadable");
  return dset;
}

std::vector<std::uint64_t> FileReader::shape(const std::string& name) const {
  const std::lock_guard lock(data::hdf5_mutex());
  const H5Id dset = open(name);
  const H5Id space(H5Dget_space(dset.get()), H5Sclose);
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  require(rank >= 0, "checkpoint " + path_ + ": dataset " + name + ": unreadable shape");
  std::vector<hsize_t> dims(std::size_t(rank), 0);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

std::optional<Piece> FileReader::piece(const std::string& name) const {
  const std::lock_guard lock(data::hdf5_mutex());
  const H5Id dset = open(name);
  if (H5Aexists(dset.get(), "offset") <= 0) return std::nullopt;
  const std::string where = "checkpoint " + path_ + ": dataset " + name + ": ";
  Piece p;
  {
    const H5Id attr(H5Aopen(dset.get(), "offset", H5P_DEFAULT), H5Aclose);
    require(attr.valid() && H5Aread(attr.get(), H5T_NATIVE_UINT64, &p.offset) >= 0, where + "unreadable offset");
  }
  require(H5Aexists(dset.get(), "shape") > 0, where + "a piece without the whole's shape");
  const H5Id attr(H5Aopen(dset.get(), "shape", H5P_DEFAULT), H5Aclose);
  const H5Id space(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID, H5Sclose);
  const hssize_t n = space.valid() ? H5Sget_simple_extent_npoints(space.get()) : -1;
  require(n > 0, where + "unreadable shape");
  p.shape.resize(std::size_t(n));
  require(H5Aread(attr.get(), H5T_NATIVE_UINT64, p.shape.data()) >= 0, where + "unreadable shape");
  return p;
}

void FileReader::read(const std::string& name, hid_t mem_type, void* host, std::size_t count) const {
  const std::lock_guard lock(data::hdf5_mutex());
  std::size_t have = 1;
  for (std::uint64_t d : shape(name)) have *= std::size_t(d);
  require(have == count, "checkpoint " + path_ + ": dataset " + name + " holds " + std::to_string(have) +
                             " values, expected " + std::to_string(count));
  const H5Id dset = open(name);
  require(H5Dread(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, host) >= 0,
          "checkpoint " + path_ + ": dataset " + name + " fails its checksum or cannot be read (damaged file)");
}

void FileReader::tensor(const std::string& name, float* host, std::size_t count) const {
  read(name, H5T_NATIVE_FLOAT, host, count);
}

std::int64_t FileReader::int_scalar(const std::string& name) const {
  std::int64_t v = 0;
  read(name, H5T_NATIVE_INT64, &v, 1);
  return v;
}

double FileReader::real_scalar(const std::string& name) const {
  double v = 0;
  read(name, H5T_NATIVE_DOUBLE, &v, 1);
  return v;
}

std::string FileReader::attribute(const std::string& name) const {
  const std::lock_guard lock(data::hdf5_mutex());
  const std::string where = "checkpoint " + path_ + ": attribute " + name;
  require(H5Aexists(file_.get(), name.c_str()) > 0, where + " missing");
  const H5Id attr(H5Aopen(file_.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  const H5Id type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID, H5Tclose);
  require(type.valid() && H5Tget_class(type.get()) == H5T_STRING && !H5Tis_variable_str(type.get()),
          where + ": not a fixed-length string");
  std::string value(H5Tget_size(type.get()), '\0');
  require(H5Aread(attr.get(), type.get(), value.data()) >= 0, where + ": unreadable");
  value.resize(std::strlen(value.c_str()));
  return value;
}

}  // namespace avtrain::checkpoint
