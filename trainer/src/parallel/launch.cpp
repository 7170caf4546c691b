#include "volshard/trainer/launch.h"

#include "volshard/core/field.h"
#include "volshard/core/file_io.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <thread>

namespace volshard {
namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_signal_count{0};

void on_signal(int sig) {
  g_signal.store(sig);
  g_signal_count.fetch_add(1);
}

// A socket bound to `port` on every interface with SO_REUSEADDR, as the
// rendezvous store binds: not open when something listens on the port (or
// holds it without SO_REUSEADDR); a PortReservation or a closed connection's
// TIME_WAIT does not take it from the store, nor from this.
Fd bind_any_interface(int port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int on = 1;
  if (!fd.is_open() || ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0)
    throw std::runtime_error(std::string("launcher: socket() failed: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;  // for the caller's message; close() may change it
    fd.reset();
    errno = err;
  }
  return fd;
}

constexpr const char* kErrorFileVar = "VOLSHARD_ERROR_FILE";

int64_t unix_nanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A JSON string of `text` (torchrun's error file is JSON).
std::string json_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool write_whole(const char* path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.flush();
  return static_cast<bool>(f);
}

// The workers' error files: rank<N> in a private folder, removed with it.
class ErrorFiles {
 public:
  ErrorFiles() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/volshard-launch-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) dir_ = pattern;
  }
  ~ErrorFiles() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  ErrorFiles(const ErrorFiles&) = delete;
  ErrorFiles& operator=(const ErrorFiles&) = delete;
  /// Empty when no folder could be made (the workers then print their own).
  std::string path(int64_t rank) const {
    return dir_.empty() ? std::string() : dir_ + "/rank" + std::to_string(rank);
  }
  /// The earliest report: "<unix ns>\n<message>" in each file.
  std::optional<std::string> first(int64_t first_rank, int64_t ranks) const {
    std::optional<std::pair<int64_t, std::string>> best;
    for (int64_t r = first_rank; r < first_rank + ranks && !dir_.empty(); ++r) {
      std::ifstream f(path(r), std::ios::binary);
      int64_t when = 0;
      std::string message;
      if (!(f >> when) || !std::getline(f.ignore(1), message, '\0') || message.empty()) continue;
      while (!message.empty() && message.back() == '\n') message.pop_back();
      if (!best || when < best->first) best = std::make_pair(when, message);
    }
    if (!best) return std::nullopt;
    return best->second;
  }

 private:
  std::string dir_;
};

}  // namespace

bool report_worker_error(const std::string& message) {
  bool written = false;
  if (const char* path = std::getenv(kErrorFileVar); path && *path)
    written = write_whole(path, std::to_string(unix_nanoseconds()) + "\n" + message + "\n");
  // torchrun's format (torch.distributed.elastic's ErrorHandler): it prints
  // the message as the root cause (where no py_callstack is given), and the
  // worker's own stderr as it is.
  if (const char* path = std::getenv("TORCHELASTIC_ERROR_FILE"); path && *path) {
    const std::string seconds = std::to_string(unix_nanoseconds() / 1000000000);
    write_whole(path, "{\"message\": {\"message\": " + json_quoted(message) +
                          ", \"extraInfo\": {\"timestamp\": \"" + seconds + "\"}}}\n");
  }
  return written;
}

void LaunchOptions::validate() const {
  const auto bad = [](const std::string& what) { throw FieldError("launcher: " + what); };
  if (nproc_per_node < 1 || nproc_per_node > 1024)
    bad(field_ref("nproc_per_node") + "=" + std::to_string(nproc_per_node) +
        " must be in [1, 1024]");
  if (nnodes < 1) bad(field_ref("nnodes") + "=" + std::to_string(nnodes) + " must be >= 1");
  if (node_rank < 0 || node_rank >= nnodes)
    bad(field_ref("node_rank") + "=" + std::to_string(node_rank) + " must be in [0, " +
        field_ref("nnodes") + "=" + std::to_string(nnodes) + ")");
  if (master_port < 0 || master_port > 65535)
    bad(field_ref("master_port") + "=" + std::to_string(master_port) + " must be in [0, 65535]");
  if (master_port == 0 && nnodes > 1)
    bad(field_ref("master_port") + " is required with " + field_ref("nnodes") + "=" +
        std::to_string(nnodes));
  if (master_addr.empty()) bad(field_ref("master_addr") + " is empty");
  if (command.empty()) throw std::invalid_argument("launcher: no worker command");
}

PortReservation::PortReservation() : fd_(bind_any_interface(0)) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (!fd_.is_open() || ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error(std::string("launcher: cannot bind a free port: ") +
                             std::strerror(errno));
  port_ = ntohs(addr.sin_port);
}

void check_port_free(int port) {
  if (!bind_any_interface(port).is_open())
    throw FieldError("launcher: " + field_ref("master_port") + "=" + std::to_string(port) +
                     " is busy (" + std::strerror(errno) +
                     "); pick another or omit it for a free one");
}

int run_workers(const LaunchOptions& o) {
  o.validate();
  int port = o.master_port;
  std::optional<PortReservation> reserved;  // held while the workers run
  if (port == 0)
    port = reserved.emplace().port();
  else if (o.node_rank == 0)
    check_port_free(port);
  const int64_t world = o.nnodes * o.nproc_per_node;

  g_signal = 0;
  g_signal_count = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{}, old_usr1{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGUSR1, &sa, &old_usr1);  // SLURM's warning (--signal=USR1@120), forwarded

  const ErrorFiles errors;
  std::vector<pid_t> pids;
  for (int64_t local = 0; local < o.nproc_per_node; ++local) {
    const int64_t rank = o.node_rank * o.nproc_per_node + local;
    std::vector<std::string> env_strings{"RANK=" + std::to_string(rank),
                                         "LOCAL_RANK=" + std::to_string(local),
                                         "WORLD_SIZE=" + std::to_string(world),
                                         "LOCAL_WORLD_SIZE=" + std::to_string(o.nproc_per_node),
                                         "MASTER_ADDR=" + o.master_addr,
                                         "MASTER_PORT=" + std::to_string(port),
                                         "GROUP_RANK=" + std::to_string(o.node_rank)};
    if (const std::string file = errors.path(rank); !file.empty())
      env_strings.push_back(std::string(kErrorFileVar) + "=" + file);
    if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr)
      env_strings.push_back("TORCH_CPP_LOG_LEVEL=ERROR");
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      throw std::runtime_error(std::string("launcher: fork failed: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphans if the launcher dies
      for (auto& e : env_strings) ::putenv(e.data());
      std::vector<char*> argv;
      for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "launcher: cannot start %s: %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    pids.push_back(pid);
  }

  std::vector<bool> running(pids.size(), true);
  size_t alive = pids.size();
  int status_out = 0;
  bool failed = false;
  int forwarded = 0;
  std::chrono::steady_clock::time_point kill_at{};
  while (alive > 0) {
    if (g_signal_count.load() > forwarded) {
      const int sig = g_signal.load();
      const bool second = forwarded > 0;
      for (size_t i = 0; i < pids.size(); ++i)
        if (running[i]) ::kill(pids[i], second ? SIGKILL : sig);
      if (!failed) status_out = 128 + sig;
      forwarded = g_signal_count.load();
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != pid || !running[i]) continue;
        running[i] = false;
        --alive;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && forwarded == 0) {
          const int64_t rank = o.node_rank * o.nproc_per_node + static_cast<int64_t>(i);
          std::cerr << "launcher: worker rank " << rank << " (pid " << pid << ") "
                    << (WIFEXITED(status)
                            ? "exited with status " + std::to_string(code)
                            : "was killed by signal " + std::to_string(WTERMSIG(status)))
                    << "\n";
          if (!failed) {
            failed = true;
            status_out = code;
            kill_at = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000));
          }
        }
      }
      continue;
    }
    if (failed && std::chrono::steady_clock::now() >= kill_at) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (!running[i]) continue;
        std::cerr << "launcher: killing worker rank "
                  << o.node_rank * o.nproc_per_node + static_cast<int64_t>(i) << " (still running "
                  << o.grace_seconds << " s after a failure)\n";
        ::kill(pids[i], SIGKILL);
      }
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  // The cause last, where a cluster log's tail shows it.
  if (const auto cause = errors.first(o.node_rank * o.nproc_per_node, o.nproc_per_node))
    std::cerr << *cause << "\n";
  return status_out;
}

// A JSON object of two integers, written and read without a JSON library
// (launch.cpp stays std only).
void write_launch_record(const std::string& run_dir, const LaunchRecord& r) {
  write_string_atomic(run_dir + "/launch.json",
                      "{\"nproc_per_node\": " + std::to_string(r.nproc_per_node) +
                          ", \"nnodes\": " + std::to_string(r.nnodes) + "}\n");
}

std::optional<LaunchRecord> read_launch_record(const std::string& run_dir) {
  std::string text;
  try {
    text = read_text_file(run_dir + "/launch.json");
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (text.size() > 4096) return std::nullopt;
  const auto number = [&text](const std::string& key) -> int64_t {
    const size_t at = text.find("\"" + key + "\":");
    if (at == std::string::npos) return -1;
    const char* start = text.c_str() + at + key.size() + 3;
    char* end = nullptr;
    const long long v = std::strtoll(start, &end, 10);
    return end == start ? -1 : static_cast<int64_t>(v);
  };
  LaunchRecord r;
  r.nproc_per_node = number("nproc_per_node");
  r.nnodes = number("nnodes");
  if (r.nproc_per_node < 1 || r.nproc_per_node > 1024 || r.nnodes < 1 || r.nnodes > 65536)
    return std::nullopt;
  return r;
}

}  // namespace volshard
