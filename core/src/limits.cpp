#include "volshard/core/limits.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace volshard {

int64_t physical_memory_bytes() {
  if (const char* env = std::getenv("VOLSHARD_MEMORY_BYTES"); env != nullptr && *env != '\0')
    return std::strtoll(env, nullptr, 10);
  // Read once: the loader asks for every batch buffer it allocates.
  static const int64_t total = [] {
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    int64_t kb = 0;
    while (meminfo >> key >> kb >> unit)
      if (key == "MemTotal:") return kb * 1024;
    return int64_t{0};
  }();
  return total;
}

std::string bytes_text(double bytes) {
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  size_t unit = 0;
  while (bytes >= 1000.0 && unit + 1 < sizeof kUnits / sizeof kUnits[0]) {
    bytes /= 1000.0;
    ++unit;
  }
  char text[32];
  if (unit + 1 == sizeof kUnits / sizeof kUnits[0] && bytes >= 1000.0)
    std::snprintf(text, sizeof text, "%.2g %s", bytes, kUnits[unit]);
  else
    std::snprintf(text, sizeof text, bytes < 10.0 && unit > 0 ? "%.1f %s" : "%.0f %s", bytes,
                  kUnits[unit]);
  return text;
}

void check_fits_in_memory(double bytes, const std::string& what) {
  const int64_t memory = physical_memory_bytes();
  if (memory <= 0 || !(bytes > static_cast<double>(memory))) return;
  throw std::invalid_argument(what + " needs " + bytes_text(bytes) + " of memory; this machine has " +
                              bytes_text(static_cast<double>(memory)));
}

}  // namespace volshard
