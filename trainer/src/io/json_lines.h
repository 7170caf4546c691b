#pragma once
// The JSON-lines files of a run (metrics.jsonl, fingerprints.jsonl, a trace),
// read as repro and diff read them: bounded, whoever made the file.

#include <fcntl.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "volshard/core/error.h"
#include "volshard/core/file_io.h"

namespace volshard {

/// What a JSON-lines file may hold. A line nested deeper than max_depth is
/// refused before it is parsed: nlohmann's copies and comparisons recurse, and
/// a 201 KB line nested 100,000 deep overflowed the stack.
struct JsonLinesLimits {
  int64_t max_file_bytes = int64_t{1} << 30;  ///< a million steps' fingerprints
  int64_t max_line_bytes = int64_t{16} << 20;
  int64_t max_depth = 64;  ///< arrays and objects inside each other
};

/// One line of a JSON-lines file: its number, from 1, and its value.
struct JsonLine {
  int64_t number = 0;
  nlohmann::json value;
};

/// `path` opened for reading, if it is a regular file (a symbolic link to one
/// is followed), and its size in bytes: a directory, a FIFO or a device
/// (/dev/zero) is refused before a byte is read, and a FIFO's writer is not
/// waited for. Throws std::runtime_error "path: why". (core's open_for_reading
/// opens without O_NONBLOCK, so a FIFO would make it wait.)
inline Fd open_regular_file(const std::string& path, int64_t* size) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.is_open()) fail_errno(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail_errno(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode))
    fail_file(path, std::string("not a regular file (") +
                        (S_ISDIR(st.st_mode)                          ? "a directory"
                         : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                         : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                         : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                      : "not a file") +
                        ")");
  *size = static_cast<int64_t>(st.st_size);
  return fd;
}

/// The bytes of `path`, a regular file (open_regular_file) of at most
/// `max_bytes`; throws std::runtime_error "path: why".
inline std::string read_regular_file(const std::string& path, int64_t max_bytes) {
  int64_t size = 0;
  const Fd fd = open_regular_file(path, &size);
  if (size > max_bytes)
    fail_file(path,
              std::to_string(size) + " bytes, more than the limit of " + std::to_string(max_bytes));
  std::string bytes(static_cast<size_t>(size), '\0');
  read_exactly(fd.get(), reinterpret_cast<uint8_t*>(bytes.data()), bytes.size(), 0, path);
  return bytes;
}

namespace detail {

// Whether `text` nests arrays and objects deeper than `max_depth` (brackets in
// strings do not count). Linear, no recursion.
inline bool nested_deeper_than(std::string_view text, int64_t max_depth) {
  int64_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// Each line of `path` that is a JSON object, within `limits`. A line that is not
// one is skipped when `strict` is false (or when it is the last line, cut before
// its newline: what a killed writer leaves); otherwise std::runtime_error
// "path:line: why". Blank lines are skipped. A missing file reads as no lines.
inline std::vector<JsonLine> read_lines(const std::string& path, const JsonLinesLimits& limits,
                                        bool strict) {
  std::vector<JsonLine> rows;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !std::filesystem::is_symlink(path, ec)) return rows;
  const std::string text = read_regular_file(path, limits.max_file_bytes);
  int64_t number = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    const bool torn = nl == std::string::npos;  // the last line, without its newline
    const std::string_view line(text.data() + at, (torn ? text.size() : nl) - at);
    at = torn ? text.size() : nl + 1;
    ++number;
    const auto refuse = [&](const std::string& why) {
      if (strict && !torn) fail_file(path + ":" + std::to_string(number), why);
    };
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (static_cast<int64_t>(line.size()) > limits.max_line_bytes) {
      refuse("a line of " + std::to_string(line.size()) + " bytes, longer than the limit of " +
             std::to_string(limits.max_line_bytes));
      continue;
    }
    if (nested_deeper_than(line, limits.max_depth)) {
      refuse("nested deeper than " + std::to_string(limits.max_depth) + " levels");
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      refuse("not JSON");
      continue;
    }
    if (!j.is_object()) {
      refuse(std::string("not a JSON object but a JSON ") + j.type_name());
      continue;
    }
    rows.push_back({number, std::move(j)});
  }
  return rows;
}

}  // namespace detail

/// Each line of `path`, parsed, for a reader that must compare every line
/// (diff): a line that is not a JSON object, longer than the limit or nested
/// too deep throws std::runtime_error "path:line: why", except the last line
/// when it has no newline (cut by a killed writer: skipped). A file that is not
/// a regular file, or too large, throws "path: why" before it is read. A
/// missing file reads as no lines; blank lines are skipped.
inline std::vector<JsonLine> read_json_object_lines(const std::string& path,
                                                    const JsonLinesLimits& limits = {}) {
  return detail::read_lines(path, limits, true);
}

/// Each line of `path` that is a JSON object, in order, within `limits`; any
/// other line (torn by a killed writer, too long, nested too deep) is skipped.
/// A file that is not a regular file, or too large, throws as above; a
/// missing file reads as no lines.
inline std::vector<nlohmann::json> read_json_lines(const std::string& path,
                                                   const JsonLinesLimits& limits = {}) {
  std::vector<nlohmann::json> rows;
  for (JsonLine& line : detail::read_lines(path, limits, false))
    rows.push_back(std::move(line.value));
  return rows;
}

}  // namespace volshard
