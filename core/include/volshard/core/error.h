#pragma once
// Errors that name what went wrong: the file, the field, the value. Std only.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace volshard {

/// Throws std::runtime_error(printable("path: message")).
[[noreturn]] void fail_file(const std::string& path, const std::string& message);
/// Throws std::system_error (a std::runtime_error) with code `err` and what()
/// "path: what: strerror(err)".
[[noreturn]] void fail_errno(const std::string& path, const std::string& what, int err);

/// `text` with what is not printable escaped: control characters, DEL and
/// bytes that are not valid UTF-8 become "\xHH"; printable ASCII and valid
/// multi-byte UTF-8 stay. For every message that quotes file content or a
/// path, so that the message is valid UTF-8 on one line.
std::string printable(const std::string& text);
/// printable() of each line, the line breaks kept: for a whole message on
/// its way to a terminal or a log (a path or a config value from a file may
/// hold any byte).
std::string printable_lines(const std::string& text);

/// The shortest text that reads back as `v` ("1.5", "0.1", "200", "-57",
/// "1e-05", "nan"), without an exponent where Python's repr has none: for
/// messages that name a value, and for keys that must tell two values apart.
std::string value_text(double v);

/// "96x96x96": sizes joined by 'x'; with `as_tuple`, "(96, 96, 96)" as Python
/// (and so MONAI's messages) print a shape.
std::string shape_text(const int64_t* sizes, size_t n, bool as_tuple = false);
inline std::string shape_text(const std::vector<int64_t>& s, bool as_tuple = false) {
  return shape_text(s.data(), s.size(), as_tuple);
}
template <size_t N>
std::string shape_text(const std::array<int64_t, N>& s, bool as_tuple = false) {
  return shape_text(s.data(), N, as_tuple);
}

/// A size given as one value (a cube) or three (x, y, z), as crop, roi and
/// spatial_pad take it: its three edges ({0, 0, 0} when empty; the caller
/// has checked the length).
std::array<int64_t, 3> cube_or_xyz(const std::vector<int64_t>& v);
/// "96^3" for a cube, else "40x56x40": three edges in words.
std::string edges3_text(const std::array<int64_t, 3>& e);
/// "96" or "40,56,40": a list of integers as its flag takes it (a size, the
/// network's channels and strides, the mirrored axes).
std::string edges_text(const std::vector<int64_t>& v);
/// Throws FieldError (a std::invalid_argument; field.h) "<flag>=<v> must be
/// one edge (a cube) or three, x,y,z, each in [lo, hi]" unless it is; `flag`
/// may be a field_ref, named by its key or its flag as the reader shows it.
void check_edges(const std::vector<int64_t>& v, const std::string& flag, int64_t lo, int64_t hi);

}  // namespace volshard
