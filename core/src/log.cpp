#include "volshard/core/log.h"

#include <iostream>
#include <mutex>
#include <utility>

namespace volshard {
namespace {

std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}

WarningHandler& handler() {
  static WarningHandler h;
  return h;
}

}  // namespace

WarningHandler set_warning_handler(WarningHandler h) {
  const std::lock_guard<std::mutex> lock(handler_mutex());
  return std::exchange(handler(), std::move(h));
}

void warn(const std::string& message) {
  const std::lock_guard<std::mutex> lock(handler_mutex());
  if (handler()) {
    handler()(message);
  } else {
    std::cerr << "volshard: warning: " << message << '\n';
  }
}

}  // namespace volshard
