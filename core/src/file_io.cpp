#include "volshard/core/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "volshard/core/error.h"
#include "volshard/core/field.h"
#include "volshard/core/large_blocks.h"

namespace volshard {

void ByteBufferRelease::operator()(uint8_t* p) const noexcept { release_bytes(p, bytes); }

ByteBuffer ByteBuffer::allocate(size_t size) {
  const size_t bytes = size == 0 ? 1 : size;
  ByteBuffer b;
  b.data = std::unique_ptr<uint8_t[], ByteBufferRelease>(
      static_cast<uint8_t*>(allocate_bytes(bytes)), ByteBufferRelease{bytes});
  b.size = size;
  return b;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void check_path(const std::string& path) {
  // c_str() would end the path at the NUL: another file than the one named.
  if (path.find('\0') != std::string::npos)
    throw std::invalid_argument(printable(path) + ": a path cannot hold a NUL byte");
}

Fd open_for_reading(const std::string& path, int64_t* file_size) {
  check_path(path);
  // O_NONBLOCK: opening a FIFO waits for a writer; it is refused below instead.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.is_open()) fail_errno(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail_errno(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode))
    fail_file(path, S_ISDIR(st.st_mode)    ? "not a regular file (a directory)"
                    : S_ISFIFO(st.st_mode) ? "not a regular file (a FIFO)"
                                           : "not a regular file");
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  if (file_size != nullptr) *file_size = static_cast<int64_t>(st.st_size);
  return fd;
}

void read_exactly(int fd, uint8_t* out, size_t size, int64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const size_t chunk = std::min<size_t>(size - done, size_t{1} << 30);
    const ssize_t n =
        ::pread(fd, out + done, chunk, static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, "read failed", errno);
    }
    if (n == 0) {
      fail_file(path, "truncated: the file ended after " +
                          std::to_string(offset + static_cast<int64_t>(done)) +
                          " bytes while reading " + std::to_string(size) + " bytes at offset " +
                          std::to_string(offset));
    }
    done += static_cast<size_t>(n);
  }
}

std::vector<char> read_file(const std::string& path) {
  int64_t size = 0;
  const Fd fd = open_for_reading(path, &size);
  std::vector<char> bytes(static_cast<size_t>(size));
  read_exactly(fd.get(), reinterpret_cast<uint8_t*>(bytes.data()), bytes.size(), 0, path);
  return bytes;
}

std::string read_text_file(const std::string& path) {
  const std::vector<char> bytes = read_file(path);
  return {bytes.begin(), bytes.end()};
}

namespace {

std::atomic<uint64_t> g_temp_counter{0};

// Fault injection for the tests of "disk full" and "killed while writing":
// VOLSHARD_INJECT_WRITE_FAILURE=<substring>:<enospc|kill> makes writes of
// paths containing <substring> fail with ENOSPC, or kill the process with
// SIGKILL, after half of the bytes reached the temporary file.
enum class InjectedFault { kNone, kNoSpace, kKill };

InjectedFault injected_fault(const std::string& path) {
  const char* spec = std::getenv("VOLSHARD_INJECT_WRITE_FAILURE");
  if (spec == nullptr || *spec == '\0') return InjectedFault::kNone;
  const std::string s = spec;
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || path.find(s.substr(0, colon)) == std::string::npos)
    return InjectedFault::kNone;
  const std::string mode = s.substr(colon + 1);
  return mode == "kill"     ? InjectedFault::kKill
         : mode == "enospc" ? InjectedFault::kNoSpace
                            : InjectedFault::kNone;
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<const void*>& parts,
                       const std::vector<size_t>& sizes, bool sync) {
  check_path(path);
  const InjectedFault fault = injected_fault(path);
  if (parts.size() != sizes.size())
    throw std::invalid_argument("write_file_atomic: parts and sizes differ in length");
  std::string tmp;
  Fd fd;
  for (int attempt = 0; attempt < 100 && !fd.is_open(); ++attempt) {
    const auto now =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(g_temp_counter++) +
          "-" + std::to_string(now % 1000000007u);
    fd.reset(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
    if (!fd.is_open() && errno != EEXIST)
      fail_errno(path, "cannot create the temporary file " + tmp, errno);
  }
  if (!fd.is_open()) fail_file(path, "cannot create a unique temporary file beside it");
  auto abandon = [&](const std::string& what, int err) {
    fd.reset();
    ::unlink(tmp.c_str());
    fail_errno(path, what, err);
  };
  uint64_t total = 0, written = 0;
  for (const size_t s : sizes) total += s;
  for (size_t p = 0; p < parts.size(); ++p) {
    const auto* data = static_cast<const uint8_t*>(parts[p]);
    size_t done = 0;
    while (done < sizes[p]) {
      if (fault != InjectedFault::kNone && written >= total / 2) {
        if (fault == InjectedFault::kKill) ::kill(::getpid(), SIGKILL);
        abandon("write failed after " + std::to_string(written) + " of " + std::to_string(total) +
                    " bytes (injected)",
                ENOSPC);
      }
      size_t chunk = std::min<size_t>(sizes[p] - done, size_t{1} << 30);
      if (fault != InjectedFault::kNone)
        chunk = std::min<size_t>(chunk, std::max<uint64_t>(total / 2 - written, 1));
      const ssize_t n = ::write(fd.get(), data + done, chunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        abandon("write failed after " + std::to_string(written) + " of " + std::to_string(total) +
                    " bytes",
                errno);
      }
      if (n == 0)
        abandon("write made no progress after " + std::to_string(written) + " bytes", EIO);
      done += static_cast<size_t>(n);
      written += static_cast<uint64_t>(n);
    }
  }
  if (sync && ::fsync(fd.get()) != 0) abandon("fsync failed", errno);
  if (::close(fd.release()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_errno(path, "close failed", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_errno(path, "cannot rename the temporary file " + tmp + " onto it", err);
  }
  // The new name survives a power cut only once the directory is synced too.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (sync) {
    const Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir_fd.is_open()) ::fsync(dir_fd.get());
  }
}

void write_string_atomic(const std::string& path, const std::string& text, bool sync) {
  write_file_atomic(path, {text.data()}, {text.size()}, sync);
}

LineFile::LineFile(const std::string& path, bool truncate)
    : path_((check_path(path), path)),
      fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0),
                 0644)) {
  if (!fd_.is_open()) fail_errno(path, "cannot open for writing", errno);
}

void LineFile::write(const std::string& text) {
  if (!fd_.is_open() || text.empty()) return;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_errno(path_, "write failed", n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
}

void check_not_an_input(const std::string& out, const std::vector<NamedInput>& inputs,
                        const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path out_path = fs::weakly_canonical(fs::absolute(out, ec), ec);
  for (const NamedInput& in : inputs) {
    if (in.path.empty()) continue;
    std::error_code e1, e2;
    bool same = fs::exists(out, e1) && fs::exists(in.path, e2) && fs::equivalent(out, in.path, e1);
    if (!same) {
      const fs::path in_path = fs::weakly_canonical(fs::absolute(in.path, e2), e2);
      same = !ec && !e2 && in_path == out_path;
    }
    if (same)
      throw FieldError(what + " is " + in.flag +
                       "'s file: volshard never writes over what it reads; give another path");
  }
}

}  // namespace volshard
