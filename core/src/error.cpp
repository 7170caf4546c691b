#include "volshard/core/error.h"

#include <stdexcept>
#include <system_error>

namespace volshard {

void fail_file(const std::string& path, const std::string& message) {
  throw std::runtime_error(path + ": " + message);
}

void fail_errno(const std::string& path, const std::string& what, int err) {
  // A system_error (a runtime_error) keeps the errno, so that the Python
  // module can raise FileNotFoundError/PermissionError; its what() is still
  // "path: what: strerror(err)".
  throw std::system_error(err, std::generic_category(), path + ": " + what);
}

std::string shape_text(const int64_t* sizes, size_t n, bool as_tuple) {
  std::string out = as_tuple ? "(" : "";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += as_tuple ? ", " : "x";
    out += std::to_string(sizes[i]);
  }
  return as_tuple ? out + ")" : out;
}

}  // namespace volshard
