#pragma once
// One process at a time in a folder (a training run's): DIR/run.lock names
// its holder, is made atomically (link(2), atomic on local file systems and
// NFS alike) and refreshed while the holder lives. POSIX, std only.
//
// A lock is stale, and the next start takes it over (saying so), when its
// holder is on this machine (the same host name and boot) and that process
// is gone (no such pid, or the pid now another process: another start time),
// or when its holder is on another machine and its file has not been
// refreshed for kStaleSeconds (a host that died: hosts sharing the file
// system must keep their clocks within that of each other).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace volshard {

/// Who holds a folder, as DIR/run.lock says.
struct FolderHolder {
  std::string host;
  int64_t pid = 0;
  std::string started;    ///< UTC, "2026-11-26T21:40:00Z"
  std::string command;    ///< what it runs, for the message ("volshard train")
  std::string boot_id;    ///< /proc/sys/kernel/random/boot_id: a reboot is another boot
  int64_t proc_start = 0;  ///< /proc/PID/stat's start time: a reused pid has another
  double seconds_since_refresh = 0;  ///< from the file's modification time

  /// "host h, pid 123 (volshard train), started 2026-..., seen 3 s ago".
  std::string text() const;
};

class FolderLock {
 public:
  static constexpr double kRefreshSeconds = 10;
  static constexpr double kStaleSeconds = 60;

  /// Creates `dir` (and its parents) and holds it for this process: throws
  /// std::invalid_argument naming the holder when a live one holds it, and
  /// std::runtime_error naming the path when the folder or the lock cannot be
  /// made (no permission, a file in the path, a full disk). A stale lock is
  /// taken over, with a line on stderr naming whose it was.
  static FolderLock acquire(const std::string& dir, const std::string& command);
  /// The holder DIR/run.lock names, live or stale; nullopt without one.
  static std::optional<FolderHolder> holder(const std::string& dir);
  /// Throws the std::invalid_argument acquire would throw where a live holder
  /// holds `dir`; makes and changes nothing (a check before others).
  static void check_free(const std::string& dir);

  FolderLock(FolderLock&&) noexcept;
  FolderLock& operator=(FolderLock&&) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  /// Stops the refresh and removes the lock (when it is still this process's).
  ~FolderLock();

  const std::string& path() const;

 private:
  struct Impl;
  explicit FolderLock(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace volshard
