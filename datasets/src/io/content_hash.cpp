#include "volshard/datasets/content_hash.h"
#include "volshard/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace volshard {
namespace {

constexpr uint64_t kP1 = 11400714785074694791ULL;
constexpr uint64_t kP2 = 14029467366897019727ULL;
constexpr uint64_t kP3 = 1609587929392839161ULL;
constexpr uint64_t kP4 = 9650029242287828579ULL;
constexpr uint64_t kP5 = 2870177450012600261ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// XXH64 reads its input as little-endian words; memcpy keeps unaligned
// reads defined, and compiles to one load on x86-64.
inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

inline uint64_t xxh_round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = rotl(acc, 31);
  return acc * kP1;
}

inline uint64_t merge_round(uint64_t acc, uint64_t value) {
  acc ^= xxh_round(0, value);
  return acc * kP1 + kP4;
}

}  // namespace

Xxh64::Xxh64(uint64_t seed)
    : acc_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1}, seed_(seed), buffer_{} {}

void Xxh64::update(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (buffered_ > 0) {
    const size_t take = std::min(size, sizeof(buffer_) - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < sizeof(buffer_)) return;
    for (int lane = 0; lane < 4; ++lane)
      acc_[lane] = xxh_round(acc_[lane], read64(buffer_ + 8 * lane));
    buffered_ = 0;
  }
  // Four independent lanes: the multiplies of one stripe overlap.
  uint64_t a0 = acc_[0], a1 = acc_[1], a2 = acc_[2], a3 = acc_[3];
  for (; size >= 32; p += 32, size -= 32) {
    a0 = xxh_round(a0, read64(p));
    a1 = xxh_round(a1, read64(p + 8));
    a2 = xxh_round(a2, read64(p + 16));
    a3 = xxh_round(a3, read64(p + 24));
  }
  acc_[0] = a0;
  acc_[1] = a1;
  acc_[2] = a2;
  acc_[3] = a3;
  if (size > 0) {
    std::memcpy(buffer_, p, size);
    buffered_ = size;
  }
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (const uint64_t a : acc_) h = merge_round(h, a);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  const unsigned char* p = buffer_;
  size_t left = buffered_;
  for (; left >= 8; p += 8, left -= 8) {
    h ^= xxh_round(0, read64(p));
    h = rotl(h, 27) * kP1 + kP4;
  }
  if (left >= 4) {
    h ^= static_cast<uint64_t>(read32(p)) * kP1;
    h = rotl(h, 23) * kP2 + kP3;
    p += 4;
    left -= 4;
  }
  for (; left > 0; ++p, --left) {
    h ^= *p * kP5;
    h = rotl(h, 11) * kP1;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t size, uint64_t seed) {
  Xxh64 h(seed);
  h.update(data, size);
  return h.digest();
}

FileDigest digest_file(const std::string& path) {
  const Fd fd = open_for_reading(path, nullptr);
  constexpr size_t kBlock = size_t{1} << 20;
  const std::unique_ptr<unsigned char[]> block(new unsigned char[kBlock]);
  Xxh64 h;
  FileDigest out;
  for (;;) {
    const ssize_t n = ::read(fd.get(), block.get(), kBlock);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(path + ": read failed after " + std::to_string(out.size_bytes) +
                               " bytes: " + std::strerror(errno));
    }
    if (n == 0) break;
    h.update(block.get(), static_cast<size_t>(n));
    out.size_bytes += static_cast<uint64_t>(n);
  }
  out.xxh64 = h.digest();
  return out;
}

}  // namespace volshard
