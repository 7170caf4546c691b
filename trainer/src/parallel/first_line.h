#pragma once
// One-line messages from library errors: c10 errors append a backtrace to
// what(), which our errors quote only up to its first line. The lowest room
// that quotes them (comm's collectives) holds it; io and engine read it here.

#include <exception>
#include <string>

namespace volshard::detail {

/// The first line of an exception's message.
inline std::string first_line(const std::exception& e) {
  std::string msg = e.what();
  if (const size_t nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  return msg;
}

}  // namespace volshard::detail
