#include "data/value_digest.hpp"

#include <xxhash.h>

#include <bit>
#include <cstdio>
#include <new>
#include <utility>

namespace avtrain::data {

// The digest is of the little-endian bytes; a big-endian build would have to swap them first.
static_assert(std::endian::native == std::endian::little, "value digests hash the values' little-endian bytes");

std::string digest_attribute(const char* dataset) { return std::string("digest_") + (dataset[0] == '/' ? dataset + 1 : dataset); }

const char* digested_dataset(std::size_t d, int version) {
  return d == digest_label && version >= 2 ? "/labels" : kDigestedDatasets[d];
}

std::string hex_digest(std::uint64_t digest) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(digest));
  return text;
}

ValueDigest::ValueDigest() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state_);
}

ValueDigest::~ValueDigest() {
  if (state_ != nullptr) XXH3_freeState(state_);
}

ValueDigest::ValueDigest(ValueDigest&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}

ValueDigest& ValueDigest::operator=(ValueDigest&& other) noexcept {
  std::swap(state_, other.state_);
  return *this;
}

void ValueDigest::add(const void* bytes, std::size_t size) {
  if (size > 0) XXH3_64bits_update(state_, bytes, size);
}

std::uint64_t ValueDigest::value() const { return XXH3_64bits_digest(state_); }

}  // namespace avtrain::data
