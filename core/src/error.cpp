#include "volshard/core/error.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "volshard/core/field.h"

namespace volshard {

void fail_file(const std::string& path, const std::string& message) {
  // Paths and messages quote file content: keep the message valid UTF-8.
  throw std::runtime_error(printable(path + ": " + message));
}

void fail_errno(const std::string& path, const std::string& what, int err) {
  // A system_error (a runtime_error) keeps the errno, so that the Python
  // module can raise FileNotFoundError/PermissionError; its what() is still
  // "path: what: strerror(err)".
  throw std::system_error(err, std::generic_category(), printable(path + ": " + what));
}

std::string value_text(double v) {
  char buf[32];
  const bool plain = std::abs(v) >= 1e-4 && std::abs(v) < 1e16;
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    // NaN never reads back equal: "nan" at 17 digits.
    if (std::strtod(buf, nullptr) == v && !(plain && std::strchr(buf, 'e') != nullptr)) break;
  }
  return buf;
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (2..4), or 0.
size_t utf8_sequence(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // the second byte's range (no overlongs, surrogates)
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  if (n == 0 || i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string printable_lines(const std::string& text) {
  std::string out;
  size_t begin = 0;
  for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1)
    out += printable(text.substr(begin, end - begin)) + "\n";
  return out + printable(text.substr(begin));
}

std::string printable(const std::string& text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (const size_t n = c >= 0x80 ? utf8_sequence(text, i) : 0; n > 0) {
      out.append(text, i, n);
      i += n;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    }
  }
  return out;
}

std::string shape_text(const int64_t* sizes, size_t n, bool as_tuple) {
  std::string out = as_tuple ? "(" : "";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += as_tuple ? ", " : "x";
    out += std::to_string(sizes[i]);
  }
  return as_tuple ? out + ")" : out;
}

std::array<int64_t, 3> cube_or_xyz(const std::vector<int64_t>& v) {
  if (v.empty()) return {0, 0, 0};
  if (v.size() < 3) return {v[0], v[0], v[0]};
  return {v[0], v[1], v[2]};
}

std::string edges3_text(const std::array<int64_t, 3>& e) {
  return e[0] == e[1] && e[1] == e[2] ? std::to_string(e[0]) + "^3" : shape_text(e);
}

std::string edges_text(const std::vector<int64_t>& v) {
  std::string text;
  for (const int64_t e : v) text += (text.empty() ? "" : ",") + std::to_string(e);
  return text;
}

void check_edges(const std::vector<int64_t>& v, const std::string& flag, int64_t lo, int64_t hi) {
  bool ok = v.size() == 1 || v.size() == 3;
  for (const int64_t e : v) ok = ok && e >= lo && e <= hi;
  if (!ok) {
    throw FieldError(flag + "=" + edges_text(v) +
                     " must be one edge (a cube) or three, x,y,z, each in [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + "]");
  }
}

}  // namespace volshard
