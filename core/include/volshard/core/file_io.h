#pragma once
// File I/O every library shares: one owner of a file descriptor, whole-file
// and exact reads that name the path, and atomic writes. POSIX, std only.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace volshard {

/// Gives a ByteBuffer's bytes back to allocate_bytes (large_blocks.h).
struct ByteBufferRelease {
  size_t bytes = 0;
  void operator()(uint8_t* p) const noexcept;
};

/// Heap bytes without zero-initialisation.
struct ByteBuffer {
  std::unique_ptr<uint8_t[], ByteBufferRelease> data;
  size_t size = 0;
  /// `size` uninitialised bytes from allocate_bytes: a volume's buffers of
  /// 16 MiB and more are reused through the large-block cache when it is on.
  static ByteBuffer allocate(size_t size);
};

/// Owns a file descriptor: closes it on destruction. Movable, not copyable.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  int get() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  /// Gives the descriptor up without closing it.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes the current descriptor (if any) and owns `fd`.
  void reset(int fd = -1);

 private:
  int fd_;
};

/// Throws std::invalid_argument when `path` holds a NUL byte (the system
/// would open the path cut at it); every function here checks it.
void check_path(const std::string& path);

/// Opens a regular file for reading and reports its size in bytes; throws
/// std::runtime_error "path: cannot open: <reason>" (or "not a regular file").
Fd open_for_reading(const std::string& path, int64_t* file_size);

/// Reads [offset, offset + size) completely (pread, EINTR retried); throws
/// std::runtime_error naming the path, and where the file ended if it is short.
void read_exactly(int fd, uint8_t* out, size_t size, int64_t offset, const std::string& path);

/// The whole file; throws std::runtime_error naming the path.
std::vector<char> read_file(const std::string& path);
/// The whole file as text; throws std::runtime_error naming the path.
std::string read_text_file(const std::string& path);

/// Temporary file beside `path`, write, fsync, rename, fsync the folder: a
/// reader sees the old file or the new one, never a part. On any failure
/// (disk full, no permission) the temporary is removed, `path` is untouched
/// and std::runtime_error names the path and the cause. `sync` = false skips
/// both fsyncs (for files whose reader checks every byte, like the cache's
/// entries: a crash may then leave a torn file).
///
/// Tests inject failures with VOLSHARD_INJECT_WRITE_FAILURE=<path
/// substring>:<enospc|kill> (ENOSPC, or SIGKILL, half-way through).
void write_file_atomic(const std::string& path, const std::vector<const void*>& parts,
                       const std::vector<size_t>& sizes, bool sync = true);
/// write_file_atomic of one string.
void write_string_atomic(const std::string& path, const std::string& text, bool sync = true);

/// A file a command reads, named by its flag ("--image") or a field_ref.
struct NamedInput {
  std::string flag;
  std::string path;
};
/// Throws FieldError (field.h) when `out` is one of `inputs` (the same file
/// by device and inode when both exist, else the same normalised path):
/// "<what> is --image's file: volshard never writes over what it reads; give
/// another path" (`what` names the output: "predict: --out=a.nii.gz"; it and
/// the inputs' names may be field_refs).
/// Nothing a command reads is replaced by it.
void check_not_an_input(const std::string& out, const std::vector<NamedInput>& inputs,
                        const std::string& what);

/// Appends whole lines, one write() each (O_APPEND): several processes may
/// share the file, and a killed writer leaves only whole lines behind.
class LineFile {
 public:
  LineFile() = default;
  /// Opens (creating it; emptying it when `truncate`); throws naming the path.
  LineFile(const std::string& path, bool truncate);
  bool is_open() const { return fd_.is_open(); }
  /// Writes `text` (one or more whole lines); throws naming the path.
  void write(const std::string& text);

 private:
  std::string path_;
  Fd fd_;
};

}  // namespace volshard
