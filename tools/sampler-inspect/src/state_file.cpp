#include "volshard/inspect/state_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace volshard::inspect {
namespace {

// Little-endian fields of a zip archive; out of range reads as a bad archive.
class Bytes {
 public:
  Bytes(const std::string& b, const std::string& path) : b_(b), path_(path) {}
  uint64_t u(size_t at, size_t n) const {
    if (at + n > b_.size() || at + n < at) fail("a field lies past the end of the file");
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= uint64_t{static_cast<unsigned char>(b_[at + k])} << (8 * k);
    return v;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument(path_ + ": not a readable checkpoint archive (" + what + ")");
  }
  const std::string& b_;
  const std::string& path_;
};

// The stored (uncompressed) entry of a zip archive whose name ends in
// `suffix`, as PyTorch writes its archives (zip64 records understood).
std::string zip_entry(const Bytes& z, const std::string& suffix) {
  const std::string& b = z.b_;
  if (b.size() < 22) z.fail("too short for a zip archive");
  size_t eocd = std::string::npos;
  for (size_t at = b.size() - 22 + 1; at-- > 0 && b.size() - at <= 22 + 65535;)
    if (z.u(at, 4) == 0x06054b50) {
      eocd = at;
      break;
    }
  if (eocd == std::string::npos) z.fail("no zip end-of-directory record");
  uint64_t entries = z.u(eocd + 10, 2), cd = z.u(eocd + 16, 4);
  if ((cd == 0xffffffff || entries == 0xffff) && eocd >= 20 && z.u(eocd - 20, 4) == 0x07064b50) {
    const uint64_t rec = z.u(eocd - 20 + 8, 8);
    if (z.u(rec, 4) != 0x06064b50) z.fail("bad zip64 end-of-directory record");
    entries = z.u(rec + 32, 8);
    cd = z.u(rec + 48, 8);
  }
  uint64_t at = cd;
  for (uint64_t e = 0; e < entries; ++e) {
    if (z.u(at, 4) != 0x02014b50) z.fail("bad zip central directory");
    const uint64_t method = z.u(at + 10, 2);
    uint64_t size = z.u(at + 20, 4);
    const uint64_t name_len = z.u(at + 28, 2), extra_len = z.u(at + 30, 2),
                   comment_len = z.u(at + 32, 2);
    uint64_t local = z.u(at + 42, 4);
    z.u(at + 46, name_len + extra_len);  // bounds
    const std::string name = b.substr(at + 46, name_len);
    // zip64 extra field: the 8-byte values of the 32-bit fields that are 0xffffffff.
    for (uint64_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = z.u(x, 2), len = z.u(x + 2, 2);
      if (id == 1) {
        uint64_t p = x + 4;
        if (z.u(at + 24, 4) == 0xffffffff) p += 8;  // uncompressed size
        if (size == 0xffffffff) size = z.u(p, 8), p += 8;
        if (local == 0xffffffff) local = z.u(p, 8);
      }
      x += 4 + len;
    }
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      if (method != 0) z.fail(name + " is compressed (method " + std::to_string(method) + ")");
      if (z.u(local, 4) != 0x04034b50) z.fail("bad zip local header of " + name);
      const uint64_t data = local + 30 + z.u(local + 26, 2) + z.u(local + 28, 2);
      z.u(data, size);  // bounds
      return b.substr(data, size);
    }
    at += 46 + name_len + extra_len + comment_len;
  }
  z.fail("no entry named *" + suffix);
}

// The text after the pickled dict key `key`: the string value that follows
// it (BINUNICODE / SHORT_BINUNICODE / BINUNICODE8), memo opcodes skipped.
std::string pickled_string_after(const Bytes& z, const std::string& pkl, const std::string& key) {
  std::string pattern = "X";
  for (int k = 0; k < 4; ++k) pattern += static_cast<char>((key.size() >> (8 * k)) & 0xff);
  pattern += key;
  const size_t found = pkl.find(pattern);
  if (found == std::string::npos) z.fail("no '" + key + "' entry: not a volshard checkpoint");
  const Bytes p(pkl, z.path_);
  size_t at = found + pattern.size();
  for (;;) {  // BINPUT, LONG_BINPUT, MEMOIZE
    const auto op = static_cast<unsigned char>(p.u(at, 1));
    if (op == 'q')
      at += 2;
    else if (op == 'r')
      at += 5;
    else if (op == 0x94)
      at += 1;
    else
      break;
  }
  const auto op = static_cast<unsigned char>(p.u(at, 1));
  uint64_t len = 0;
  if (op == 'X')
    len = p.u(at + 1, 4), at += 5;
  else if (op == 0x8c)
    len = p.u(at + 1, 1), at += 2;
  else if (op == 0x8d)
    len = p.u(at + 1, 8), at += 9;
  else
    z.fail("the '" + key + "' entry is not a string");
  p.u(at, len);  // bounds
  return pkl.substr(at, len);
}

}  // namespace

SamplerState read_sampler_state(const std::string& bytes, const std::string& path) {
  std::string json_text = bytes;
  if (bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0) {
    const Bytes z(bytes, path);
    const std::string pkl = zip_entry(z, "data.pkl");
    const auto meta = nlohmann::json::parse(pickled_string_after(z, pkl, "meta"), nullptr, false);
    if (meta.is_discarded() || !meta.is_object() || !meta.contains("sampler"))
      z.fail("its 'meta' entry holds no JSON with a \"sampler\"");
    json_text = meta.at("sampler").dump();
  }
  try {
    return SamplerState::from_json(json_text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

}  // namespace volshard::inspect
