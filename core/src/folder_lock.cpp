#include "volshard/core/folder_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "volshard/core/error.h"
#include "volshard/core/field.h"
#include "volshard/core/file_io.h"
#include "volshard/core/log.h"

namespace volshard {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = "run.lock";

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::string first_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string boot_id() { return first_line_of("/proc/sys/kernel/random/boot_id"); }

// /proc/PID/stat's 22nd field (the start time in clock ticks after boot), or
// -1 where the process or the file is not there. The command name (field 2)
// may hold spaces and parentheses: the fields after it follow the last ')'.
int64_t process_start(int64_t pid) {
  const std::string stat = first_line_of("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i)
    if (i == 22) return std::atoll(field.c_str());
  return -1;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string serialize(const FolderHolder& h) {
  std::ostringstream out;
  out << "host=" << h.host << "\npid=" << h.pid << "\nstarted=" << h.started
      << "\ncommand=" << h.command << "\nboot_id=" << h.boot_id << "\nproc_start=" << h.proc_start
      << "\n";
  return out.str();
}

// The holder a lock file's text names; nullopt where it names none (empty,
// or not this format).
std::optional<FolderHolder> parse(const std::string& text) {
  FolderHolder h;
  std::istringstream in(text);
  std::string line;
  bool has_pid = false;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "host") h.host = value;
    if (key == "pid") has_pid = (h.pid = std::atoll(value.c_str())) > 0;
    if (key == "started") h.started = value;
    if (key == "command") h.command = value;
    if (key == "boot_id") h.boot_id = value;
    if (key == "proc_start") h.proc_start = std::atoll(value.c_str());
  }
  if (!has_pid || h.host.empty()) return std::nullopt;
  return h;
}

bool same_holder(const FolderHolder& a, const FolderHolder& b) {
  return a.host == b.host && a.pid == b.pid && a.started == b.started &&
         a.proc_start == b.proc_start;
}

// Whether the holder may still run; `why` says why not.
bool live(const FolderHolder& h, std::string* why) {
  const std::string here = host_name(), boot = boot_id();
  if (h.host == here && !boot.empty() && h.boot_id == boot) {
    if (::kill(static_cast<pid_t>(h.pid), 0) != 0 && errno == ESRCH) {
      *why = "pid " + std::to_string(h.pid) + " is gone";
      return false;
    }
    const int64_t start = process_start(h.pid);
    if (start >= 0 && h.proc_start > 0 && start != h.proc_start) {
      *why = "pid " + std::to_string(h.pid) + " is another process now";
      return false;
    }
    return true;
  }
  if (h.host == here && !boot.empty() && !h.boot_id.empty()) {
    *why = "this machine has restarted since";
    return false;
  }
  // Another machine: only the refreshes tell.
  if (h.seconds_since_refresh >= FolderLock::kStaleSeconds) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.0f", h.seconds_since_refresh);
    *why = std::string("not refreshed for ") + seconds + " s (a lock lives while refreshed every " +
           std::to_string(static_cast<int>(FolderLock::kRefreshSeconds)) + " s)";
    return false;
  }
  return true;
}

double seconds_since_modified(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  const double modified =
      static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(now).count() - modified;
}

std::optional<FolderHolder> read_holder(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  std::optional<FolderHolder> h = parse(text.str());
  if (h) h->seconds_since_refresh = seconds_since_modified(path);
  return h;
}

}  // namespace

std::string FolderHolder::text() const {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.0f", seconds_since_refresh);
  return "host " + host + ", pid " + std::to_string(pid) +
         (command.empty() ? std::string() : " (" + command + ")") + ", started " + started +
         ", its lock refreshed " + seconds + " s ago";
}

struct FolderLock::Impl {
  std::string path;
  FolderHolder me;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::thread refresher;

  void refresh_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!wake.wait_for(lock, std::chrono::duration<double>(kRefreshSeconds),
                          [this] { return stopping; }))
      ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // now; a failure leaves it to go stale
  }

  ~Impl() {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (refresher.joinable()) refresher.join();
    const std::optional<FolderHolder> now = read_holder(path);
    if (now && same_holder(*now, me)) ::unlink(path.c_str());
  }
};

FolderLock::FolderLock(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FolderLock::FolderLock(FolderLock&&) noexcept = default;
FolderLock& FolderLock::operator=(FolderLock&&) noexcept = default;
FolderLock::~FolderLock() = default;

const std::string& FolderLock::path() const { return impl_->path; }

std::optional<FolderHolder> FolderLock::holder(const std::string& dir) {
  return read_holder((fs::path(dir) / kLockName).string());
}

namespace {

std::string held_message(const std::string& dir, const std::string& path, const FolderHolder& h) {
  return dir + " is held by a run: " + h.text() + " (" + path +
         "). One run at a time writes a run folder; wait for it, stop it, or give another " +
         field_ref("out");
}

}  // namespace

void FolderLock::check_free(const std::string& dir) {
  const std::string path = (fs::path(dir) / kLockName).string();
  const std::optional<FolderHolder> held = read_holder(path);
  std::string why;
  if (held && live(*held, &why)) throw FieldError(held_message(dir, path, *held));
}

FolderLock FolderLock::acquire(const std::string& dir, const std::string& command) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw std::runtime_error(dir + ": cannot create the folder (" +
                             (ec ? ec.message() : std::string("a file is in the way")) + ")");
  auto impl = std::make_unique<Impl>();
  impl->path = (fs::path(dir) / kLockName).string();
  FolderHolder& me = impl->me;
  me.host = host_name();
  me.pid = static_cast<int64_t>(::getpid());
  me.started = utc_now();
  me.command = command;
  me.boot_id = boot_id();
  me.proc_start = process_start(me.pid);
  const std::string text = serialize(me);
  // The whole lock is written under another name, then linked to run.lock:
  // a reader never sees a part, and of two starts only one link succeeds.
  const std::string mine =
      (fs::path(dir) / (".run.lock." + me.host + "." + std::to_string(me.pid) + ".tmp-"))
          .string();
  for (int attempt = 0; attempt < 8; ++attempt) {
    write_string_atomic(mine, text);
    const int linked = ::link(mine.c_str(), impl->path.c_str());
    const int err = errno;
    ::unlink(mine.c_str());
    if (linked == 0) {
      impl->refresher = std::thread([raw = impl.get()] { raw->refresh_loop(); });
      return FolderLock(std::move(impl));
    }
    if (err != EEXIST) fail_errno(impl->path, "cannot create the lock", err);
    const std::optional<FolderHolder> held = read_holder(impl->path);
    if (!held) {
      // Not a lock this code writes (another program's file by that name, or
      // one emptied): refused unless it is old.
      if (seconds_since_modified(impl->path) < kStaleSeconds)
        throw std::invalid_argument(impl->path +
                                    " exists and names no holder: remove it if no run uses " +
                                    dir);
    }
    std::string why = "it names no holder";
    if (held && live(*held, &why)) throw FieldError(held_message(dir, impl->path, *held));
    // Stale: moved aside under a name of our own (of two takers, one moves
    // it); if what moved is not what was judged, it goes back.
    const std::string aside = impl->path + ".stale." + me.host + "." + std::to_string(me.pid);
    if (::rename(impl->path.c_str(), aside.c_str()) != 0) continue;
    const std::optional<FolderHolder> moved = read_holder(aside);
    if (held && moved && !same_holder(*held, *moved)) {
      if (::link(aside.c_str(), impl->path.c_str()) != 0) {
        // Someone holds it anew: that holder is judged on the next round.
      }
      ::unlink(aside.c_str());
      continue;
    }
    ::unlink(aside.c_str());
    warn(dir + ": taking over a stale lock (" +
         (held ? held->text() : std::string("unreadable")) + ": " + why + ")");
  }
  throw std::runtime_error(impl->path + ": could not take the lock after 8 attempts (other starts "
                                        "took it meanwhile)");
}

}  // namespace volshard
