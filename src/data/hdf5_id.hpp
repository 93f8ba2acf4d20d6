#pragma once
// Owning wrapper for an HDF5 identifier: closes it with the matching H5?close when it goes out of scope.
#include <hdf5.h>

#include <mutex>
#include <utility>

namespace avtrain::data {

// The HDF5 library Debian builds (the OpenMPI one included) is not thread-safe. Two threads use it
// at once in a run, the data reader (shard reads) and the background checkpoint writer: their calls,
// and the closing of any identifier, hold this lock, per dataset, so neither waits for the other's
// whole file. (Opening the shard set happens before either thread starts.)
inline std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer close) : id_(id), close_(close) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), close_(other.close_) {}
  H5Id& operator=(H5Id&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      close_ = other.close_;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_ != nullptr) {
      const std::lock_guard lock(hdf5_mutex());
      close_(id_);
    }
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// HDF5 prints its own error stack by default; we report our own one-line messages instead.
inline void silence_hdf5_error_printing() {
  const std::lock_guard lock(hdf5_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

}  // namespace avtrain::data
