#include "checkpoint/host_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include "core/error.hpp"

namespace avtrain::checkpoint {
namespace {
constexpr std::size_t kHugePage = std::size_t(2) << 20;
constexpr std::size_t kBlock = 4096;                  // O_DIRECT's alignment of sizes and offsets
constexpr std::size_t kWritePiece = std::size_t(64) << 20;
}  // namespace

void* allocate_host(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (!p) throw std::bad_alloc();
  ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without it, 4 KiB pages
  return p;
}

void FileImage::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return;
  const std::size_t grown = std::max(bytes, capacity_ + capacity_ / 2);
  char* bigger = static_cast<char*>(allocate_host(grown));
  if (data_) std::memcpy(bigger, data_, capacity_);
  std::free(data_);
  data_ = bigger;
  capacity_ = (grown + kHugePage - 1) / kHugePage * kHugePage;
}

void write_image(const std::string& path, FileImage& image, std::size_t size) {
  const std::size_t padded = (size + kBlock - 1) / kBlock * kBlock;
  image.reserve(padded);
  std::memset(image.data() + size, 0, padded - size);
  auto fail = [&](const char* what) { throw Error("checkpoint " + path + ": " + what + ": " + std::strerror(errno)); };
  // O_DIRECT first; a file system that refuses it (at open, or at the first write) gets the page cache.
  for (const bool direct : {true, false}) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
    if (fd < 0) {
      if (direct && errno == EINVAL) continue;
      fail("cannot create");
    }
    const std::size_t total = direct ? padded : size;
    std::size_t done = 0;
    bool refused = false;
    while (done < total) {
      const ssize_t n = ::write(fd, image.data() + done, std::min(kWritePiece, total - done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && direct && done == 0 && errno == EINVAL) {
        refused = true;
        break;
      }
      if (n <= 0) {
        const int err = errno;
        ::close(fd);
        errno = n < 0 ? err : EIO;
        fail("cannot write");
      }
      done += std::size_t(n);
    }
    if (refused) {
      ::close(fd);
      continue;
    }
    if ((direct && ::ftruncate(fd, off_t(size)) != 0) || ::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      fail("cannot cut to size or fsync");
    }
    if (::close(fd) != 0) fail("cannot close");
    return;
  }
}

}  // namespace avtrain::checkpoint
