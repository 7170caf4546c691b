#pragma once
// Tiny NIfTI fixtures for the tests: voxels hold their own file-order index.

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "volshard/core/limits.h"
#include "volshard/volume_io/nifti_header.h"

namespace volshard::testing {

/// A fresh directory per test under gtest's TempDir.
inline std::string test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("volshard_" + std::to_string(::getpid()) + "_" +
                                     info->test_suite_name() + "_" + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// File-order voxel index for shape (X, Y, Z[, C]).
inline int64_t file_index(const std::vector<int64_t>& shape, int64_t i, int64_t j, int64_t k,
                          int64_t c = 0) {
  const int64_t X = shape[0], Y = shape.size() > 1 ? shape[1] : 1,
                Z = shape.size() > 2 ? shape[2] : 1;
  return i + X * (j + Y * (k + Z * c));
}

/// Voxel bytes (little-endian, file order) whose value is the voxel's index,
/// cast to T (wrapping for narrow types).
template <class T>
std::vector<uint8_t> own_index_voxels(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  std::vector<uint8_t> out(static_cast<size_t>(n) * sizeof(T));
  for (int64_t v = 0; v < n; ++v) {
    const T value = static_cast<T>(v);
    std::memcpy(out.data() + static_cast<size_t>(v) * sizeof(T), &value, sizeof(T));
  }
  return out;
}

/// float32 voxels (file order) of a noise-free volume: a constant sphere on
/// zeros, which deflate shrinks ~100x (long matches).
inline std::vector<uint8_t> sphere_voxels(const std::vector<int64_t>& shape) {
  std::vector<uint8_t> out(static_cast<size_t>(shape[0] * shape[1] * shape[2]) * 4);
  const double r = 0.35 * static_cast<double>(shape[0]);
  size_t v = 0;
  for (int64_t k = 0; k < shape[2]; ++k)
    for (int64_t j = 0; j < shape[1]; ++j)
      for (int64_t i = 0; i < shape[0]; ++i, v += 4) {
        const double x = static_cast<double>(i) - 0.5 * static_cast<double>(shape[0]),
                     y = static_cast<double>(j) - 0.5 * static_cast<double>(shape[1]),
                     z = static_cast<double>(k) - 0.5 * static_cast<double>(shape[2]);
        const float value = x * x + y * y + z * z < r * r ? 0.75f : 0.0f;
        std::memcpy(out.data() + v, &value, 4);
      }
  return out;
}

/// float32 voxels of a noisy volume: uniform in [0, 1) from std::mt19937's
/// raw output (24 bits each), which deflate barely shrinks (mostly literals).
inline std::vector<uint8_t> noise_voxels(const std::vector<int64_t>& shape, uint32_t seed) {
  std::mt19937 eng(seed);
  std::vector<uint8_t> out(static_cast<size_t>(shape[0] * shape[1] * shape[2]) * 4);
  for (size_t v = 0; v < out.size(); v += 4) {
    const float value = static_cast<float>(eng() >> 8) * (1.0f / 16777216.0f);
    std::memcpy(out.data() + v, &value, 4);
  }
  return out;
}

/// Header + voxels of a valid single-file NIfTI (version 1 or 2).
inline std::vector<uint8_t> make_nifti(const std::vector<int64_t>& shape, NiftiDatatype type,
                                       const std::vector<uint8_t>& voxels, int version = 1) {
  NiftiWriteSpec spec;
  spec.shape = shape;
  spec.datatype = type;
  spec.version = version;
  spec.affine = {{{2, 0, 0, -10}, {0, 3, 0, 5}, {0, 0, 4, 7}, {0, 0, 0, 1}}};
  std::vector<uint8_t> bytes = encode_nifti_header(spec);
  bytes.insert(bytes.end(), voxels.begin(), voxels.end());
  return bytes;
}

inline std::vector<uint8_t> gzip(const std::vector<uint8_t>& bytes, int level = 1) {
  return gzip_compress(bytes.data(), bytes.size(), level);
}

template <class T>
void put_le(std::vector<uint8_t>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

/// Runs `fn` (returning a text, catching what it expects) in a forked child
/// whose address space is limited to what it maps now plus `extra_bytes`, so
/// that a large allocation fails there as on a machine without the memory.
/// Returns the child's text, or why it gave none. `dir`: where it is passed.
template <class Fn>
std::string in_child_with_address_limit(const std::string& dir, size_t extra_bytes, const Fn& fn) {
  const std::string said = dir + "/child_said.txt";
  const pid_t child = fork();
  if (child < 0) return "fork failed";
  if (child == 0) {
    std::ifstream status("/proc/self/status");
    std::string key;
    long long kb = 0;
    while (status >> key && key != "VmSize:") status.ignore(1 << 12, '\n');
    status >> kb;
    const rlimit limit{static_cast<rlim_t>(kb) * 1024 + extra_bytes, RLIM_INFINITY};
    if (kb == 0 || setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    const std::string text = fn();
    std::FILE* f = std::fopen(said.c_str(), "w");
    if (f == nullptr) _exit(4);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return "waitpid failed";
  if (!WIFEXITED(status)) return "the child died of signal " + std::to_string(WTERMSIG(status));
  if (WEXITSTATUS(status) != 0) return "the child exited " + std::to_string(WEXITSTATUS(status));
  const std::vector<uint8_t> text = read_bytes(said);
  return std::string(text.begin(), text.end());
}

/// What `fn` (an allocation expected to fail) says in such a child, 1 GB
/// above what it maps: OutOfMemoryError's text, or "not an
/// OutOfMemoryError: ..." for another error, or that nothing failed.
template <class Fn>
std::string out_of_memory_in_child(const std::string& dir, const Fn& fn) {
  return in_child_with_address_limit(dir, size_t{1} << 30, [&]() -> std::string {
    try {
      fn();
      return "nothing failed";
    } catch (const OutOfMemoryError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("not an OutOfMemoryError: ") + e.what();
    }
  });
}

/// A 4 MB .nii.gz at `path` whose header asks for a 2000 x 1000 x 1000 int16
/// volume (4.0 GB): too large to allocate under out_of_memory_in_child.
inline void write_huge_nifti_gz(const std::string& path) {
  NiftiWriteSpec spec;
  spec.shape = {2000, 1000, 1000};
  spec.datatype = NiftiDatatype::kInt16;
  const std::vector<uint8_t> header = encode_nifti_header(spec);
  std::vector<uint8_t> bytes = gzip_compress(header.data(), header.size(), 1);
  bytes.resize(bytes.size() + (size_t{4} << 20), 0x5a);  // a file the volume's size can come from
  write_bytes(path, bytes);
}

}  // namespace volshard::testing
