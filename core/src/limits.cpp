#include "volshard/core/limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "volshard/core/field.h"

namespace volshard {

namespace {

// /proc/meminfo's value of `key` ("MemTotal:"), in bytes; 0 where it has none.
int64_t meminfo_bytes(const std::string& key) {
  std::ifstream meminfo("/proc/meminfo");
  std::string name, unit;
  int64_t kb = 0;
  while (meminfo >> name >> kb >> unit)
    if (name == key) return kb * 1024;
  return 0;
}

}  // namespace

int64_t physical_memory_bytes() {
  if (const char* env = std::getenv("VOLSHARD_MEMORY_BYTES"); env != nullptr && *env != '\0')
    return std::strtoll(env, nullptr, 10);
  // Read once: the loader asks for every batch buffer it allocates.
  static const int64_t total = meminfo_bytes("MemTotal:");
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
  throw FieldError(what + " needs " + bytes_text(bytes) + " of memory; this machine has " +
                   bytes_text(static_cast<double>(memory)));
}

int64_t available_memory_bytes() {
  int64_t available = meminfo_bytes("MemAvailable:");
  // A container's or a job's limit (SLURM, Kubernetes): cgroup v2's
  // memory.max of the process's own group, less what the group uses.
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroup, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    std::ifstream max_file(dir + "/memory.max"), current_file(dir + "/memory.current");
    std::string max_text;
    int64_t current = 0;
    if (max_file >> max_text && max_text != "max" && current_file >> current) {
      const int64_t room =
          std::max<int64_t>(std::strtoll(max_text.c_str(), nullptr, 10) - current, 0);
      available = available > 0 ? std::min(available, room) : room;
    }
  }
  return available;
}

namespace {

// bytes 0: a plain std::bad_alloc (new, a std::vector), whose size is not known.
std::string out_of_memory_text(size_t bytes) {
  std::string text = bytes == 0 ? std::string("could not allocate memory")
                                : "could not allocate " + bytes_text(static_cast<double>(bytes)) +
                                      " (" + std::to_string(bytes) + " bytes)";
  const int64_t total = physical_memory_bytes(), available = available_memory_bytes();
  if (total > 0) {
    text += ": " + (available > 0 ? bytes_text(static_cast<double>(available)) : std::string("?")) +
            " of this machine's " + bytes_text(static_cast<double>(total)) + " available";
  }
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    text += std::string(total > 0 ? ", " : ": ") + "the process limited to " +
            bytes_text(static_cast<double>(limit.rlim_cur)) + " of address space (ulimit -v)";
  }
  return text;
}

}  // namespace

OutOfMemoryError::OutOfMemoryError(size_t bytes)
    : bytes_(bytes), text_(std::make_shared<const std::string>(out_of_memory_text(bytes))) {}

OutOfMemoryError::OutOfMemoryError(const std::string& context, const std::bad_alloc& inner) {
  const auto* known = dynamic_cast<const OutOfMemoryError*>(&inner);
  bytes_ = known != nullptr ? known->bytes() : 0;
  text_ = std::make_shared<const std::string>(
      context + ": " + (known != nullptr ? std::string(inner.what()) : out_of_memory_text(0)));
}

}  // namespace volshard
