// bench_nifti: loading one 128^3 float32 .nii.gz volume, noisy (uniform noise,
// compresses ~1.15x) and noise-free (constant spheres on zeros), both written
// by nibabel at its default compresslevel, measured in one run, interleaved
// round by round so that load on the machine hits every row alike:
//   nibabel (timed inside a python3 subprocess), nifti_clib's
//   nifti_image_read (zlib), raw zlib / libdeflate / ISA-L decompression of
//   the whole file into a buffer, the raw inflater read_volume picks for the
//   file, and volshard's read_volume (contiguous C x X x Y x Z, which costs
//   one transposing copy, and the file-order view).
// One thread (at::set_num_threads(1)); glibc malloc keeps multi-MB buffers
// (platform trap 3) for every row alike.
// Every row starts from the path and includes reading the file (page cache).
//
//   bench_nifti [bench/nifti_bench_nibabel.py] [--rounds N] [--python PATH]
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <fcntl.h>
#include <isa-l/igzip_lib.h>
#include <libdeflate.h>
#include <malloc.h>
#include <nifti2_io.h>  // libnifti2 and libniftiio both export nifti_image_read; volshard::nifti links nifti2 first
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/gzip.h"  // volume_io's private pick_inflater: the volshard rows' choice
#include "volshard/datasets/volume.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kVoxelBytes = size_t{128} * 128 * 128 * 4;

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<uint8_t> b(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!in) throw std::runtime_error("cannot read " + path);
  return b;
}

size_t gzip_isize(const std::vector<uint8_t>& in) {
  const uint8_t* t = in.data() + in.size() - 4;
  return size_t{t[0]} | size_t{t[1]} << 8 | size_t{t[2]} << 16 | size_t{t[3]} << 24;
}

// A checksum of the voxels so that no row can skip its work.
double probe(const float* v) {
  return static_cast<double>(v[0]) + v[kVoxelBytes / 8] + v[kVoxelBytes / 4 - 1];
}

double load_zlib(const std::string& path) {
  const auto in = slurp(path);
  std::unique_ptr<uint8_t[]> out(new uint8_t[gzip_isize(in)]);
  z_stream z{};
  inflateInit2(&z, 15 + 16);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.get();
  z.avail_out = static_cast<uInt>(gzip_isize(in));
  if (inflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("zlib failed on " + path);
  inflateEnd(&z);
  return probe(reinterpret_cast<const float*>(out.get() + 352));
}

template <class Bytes>
double inflate_libdeflate(const Bytes& in, const std::string& path) {
  const size_t n = gzip_isize(in);
  std::unique_ptr<uint8_t[]> out(new uint8_t[n]);
  static thread_local libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  size_t got = 0;
  if (libdeflate_gzip_decompress(d, in.data(), in.size(), out.get(), n, &got) !=
      LIBDEFLATE_SUCCESS) {
    throw std::runtime_error("libdeflate failed on " + path);
  }
  return probe(reinterpret_cast<const float*>(out.get() + 352));
}

double load_libdeflate(const std::string& path) { return inflate_libdeflate(slurp(path), path); }

template <class Bytes>
double inflate_isal(const Bytes& in, const std::string& path) {
  const size_t n = gzip_isize(in);
  std::unique_ptr<uint8_t[]> out(new uint8_t[n]);
  inflate_state st;
  isal_inflate_init(&st);
  st.crc_flag = ISAL_GZIP;
  st.next_in = const_cast<uint8_t*>(in.data());
  st.avail_in = static_cast<uint32_t>(in.size());
  st.next_out = out.get();
  st.avail_out = static_cast<uint32_t>(n);
  if (isal_inflate(&st) != ISAL_DECOMP_OK || st.block_state != ISAL_BLOCK_FINISH) {
    throw std::runtime_error("ISA-L failed on " + path);
  }
  return probe(reinterpret_cast<const float*>(out.get() + 352));
}

double load_isal(const std::string& path) { return inflate_isal(slurp(path), path); }

// The per-file choice of issue 20, as read_volume makes it (pick_inflater):
// from what the file says of itself at no cost, the gzip trailer's ISIZE over
// the compressed size: ISA-L for ratios in [kIsalMinRatio, kIsalMaxRatio)
// = [3, 100), libdeflate otherwise (measurements in volume_io/src/io/gzip.cpp);
// this bench's two files (1.1 and ~87) fall on either side of 3.
bool picks_isal(size_t isize, size_t compressed_bytes) {
  return volshard::detail::pick_inflater(isize, compressed_bytes) ==
         volshard::detail::Inflater::kIsal;
}

double load_picked(const std::string& path) {
  const auto in = slurp(path);
  return picks_isal(gzip_isize(in), in.size()) ? inflate_isal(in, path)
                                               : inflate_libdeflate(in, path);
}

double load_nifti_clib(const std::string& path) {
  nifti_image* img = nifti_image_read(path.c_str(), 1);
  if (!img || !img->data) throw std::runtime_error("nifti_image_read failed on " + path);
  const double p = probe(static_cast<const float*>(img->data));
  nifti_image_free(img);
  return p;
}

double load_ours(const std::string& path, volshard::VolumeLayout layout,
                 bool count_nonfinite = true) {
  volshard::ReadOptions o;
  o.layout = layout;
  o.count_nonfinite = count_nonfinite;
  const volshard::Volume v = volshard::read_volume(path, o);
  const float* p = v.data.data_ptr<float>();
  return static_cast<double>(p[0]) + p[v.data.numel() / 2] + p[v.data.numel() - 1];
}

// The python3 side, over pipes.
class Python {
 public:
  Python(const std::string& python, const std::string& script) {
    int to[2], from[2];
    if (pipe(to) != 0 || pipe(from) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to[0], 0);
      dup2(from[1], 1);
      close(to[1]);
      close(from[0]);
      execl(python.c_str(), python.c_str(), script.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to[0]);
    close(from[1]);
    in_ = fdopen(to[1], "w");
    out_ = fdopen(from[0], "r");
    ok_ = line() == "ready";
  }
  ~Python() {
    if (in_) fclose(in_);
    if (out_) fclose(out_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  bool ok() const { return ok_; }
  std::string ask(const std::string& command) {
    fprintf(in_, "%s\n", command.c_str());
    fflush(in_);
    return line();
  }

 private:
  std::string line() {
    char buf[4096];
    if (!fgets(buf, sizeof buf, out_)) return "";
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  bool ok_ = false;
};

struct Row {
  std::string name;
  bool raw;  // a raw decompressor (the floor for a decompressing reader)
  std::function<double(const std::string&)> seconds;  // one load, timed
  std::vector<double> samples;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

template <class Fn>
std::function<double(const std::string&)> timed(Fn fn) {
  return [fn](const std::string& path) {
    volatile double sink = 0;
    const auto t0 = Clock::now();
    sink = sink + fn(path);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
}

}  // namespace

int main(int argc, char** argv) {
  std::string script = "bench/nifti_bench_nibabel.py", python = VOLSHARD_PYTHON;
  int rounds = 21;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--python" && i + 1 < argc) {
      python = argv[++i];
    } else {
      script = a;
    }
  }
  // Trap 3 of the platform notes: keep multi-MB buffers in the heap, for every row alike.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  at::set_num_threads(1);
  signal(SIGPIPE, SIG_IGN);

  char tmpl[] = "/tmp/volshard_nifti_bench_XXXXXX";
  if (!mkdtemp(tmpl)) {
    perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  Python py(python, script);
  if (!py.ok()) {
    fprintf(stderr, "bench_nifti: %s %s did not start (nibabel missing?)\n", python.c_str(),
            script.c_str());
    std::filesystem::remove_all(dir);
    return 1;
  }
  if (py.ask("make " + dir) != "ok") {
    fprintf(stderr, "bench_nifti: the python side could not write the volumes\n");
    return 1;
  }

  std::vector<Row> rows;
  auto nibabel = [&py](const char* mode) {
    return [&py, mode](const std::string& path) {
      return std::stod(py.ask("load " + path + " " + mode));
    };
  };
  rows.push_back({"nibabel dataobj (F order)", false, nibabel("dataobj"), {}});
  rows.push_back({"nibabel C order (MONAI reader)", false, nibabel("monai"), {}});
  rows.push_back({"nifti_clib nifti_image_read", false, timed(load_nifti_clib), {}});
  rows.push_back({"raw zlib inflate", true, timed(load_zlib), {}});
  rows.push_back({"raw libdeflate", true, timed(load_libdeflate), {}});
  rows.push_back({"raw ISA-L igzip", true, timed(load_isal), {}});
  rows.push_back({"raw, picked by gzip ratio", false, timed(load_picked), {}});
  rows.push_back({"volshard read_volume",
                  false,
                  timed([](const std::string& p) {
                    return load_ours(p, volshard::VolumeLayout::kContiguous);
                  }),
                  {}});
  rows.push_back({"volshard, file-order view",
                  false,
                  timed([](const std::string& p) {
                    return load_ours(p, volshard::VolumeLayout::kFileOrderView);
                  }),
                  {}});
  // As load_pair reads images: ScaleIntensity meets any NaN itself, so the
  // reader skips its counting pass.
  rows.push_back({"volshard, view, no NaN count",
                  false,
                  timed([](const std::string& p) {
                    return load_ours(p, volshard::VolumeLayout::kFileOrderView, false);
                  }),
                  {}});
  double loadavg[3] = {0, 0, 0};
  if (getloadavg(loadavg, 3) < 0) loadavg[0] = -1;
  printf(
      "bench_nifti: 128^3 float32 .nii.gz written by nibabel %s; median of %d interleaved rounds;\n"
      "MB/s = decompressed voxel MB (8.39) / time; load average at start %.2f\n",
      "(default compresslevel)", rounds, loadavg[0]);
  int status = 0;
  for (const std::string kind : {"noisy", "clean"}) {
    const std::string path = dir + "/" + kind + ".nii.gz";
    for (auto& r : rows) r.samples.clear();
    for (int round = -2; round < rounds; ++round) {  // two warm-up rounds
      for (auto& r : rows) {
        const double s = r.seconds(path);
        if (round >= 0) r.samples.push_back(s);
      }
    }
    const auto file_size = std::filesystem::file_size(path);
    double nib_ms = 0, raw_ms = 1e300;
    std::string raw_name;
    for (auto& r : rows) {
      const double ms = median(r.samples) * 1e3;
      if (r.name.rfind("nibabel dataobj", 0) == 0) nib_ms = ms;
      if (r.raw && ms < raw_ms) {
        raw_ms = ms;
        raw_name = r.name;
      }
    }
    printf("\n%s: %s, %.2f MB on disk (ratio %.2f)\n", kind.c_str(),
           kind == "noisy" ? "uniform noise" : "constant spheres on zeros",
           static_cast<double>(file_size) / 1e6,
           static_cast<double>(kVoxelBytes + 352) / static_cast<double>(file_size));
    printf("| %-31s | %9s | %9s | %8s | %10s | %12s |\n", "reader", "ms/volume", "volumes/s",
           "MB/s", "x nibabel", "x fastest raw");
    printf("|%s|%s|%s|%s|%s|%s|\n", std::string(33, '-').c_str(), std::string(11, '-').c_str(),
           std::string(11, '-').c_str(), std::string(10, '-').c_str(), std::string(12, '-').c_str(),
           std::string(14, '-').c_str());
    for (auto& r : rows) {
      const double ms = median(r.samples) * 1e3;
      printf("| %-31s | %9.2f | %9.1f | %8.0f | %10.2f | %12.2f |\n", r.name.c_str(), ms, 1e3 / ms,
             static_cast<double>(kVoxelBytes) / 1e6 / (ms / 1e3), nib_ms / ms, raw_ms / ms);
    }
    printf(
        "(x nibabel: nibabel dataobj's ms / the row's ms; x fastest raw: %s's ms / the row's ms)\n",
        raw_name.c_str());
    const bool isal = picks_isal(kVoxelBytes + 352, static_cast<size_t>(file_size));
    printf(
        "(picked by gzip ratio: ISIZE / file size %.0f, %s [%d, %d), so %s; read_volume makes "
        "this pick itself for the volshard rows, at the cost of one division)\n",
        static_cast<double>(kVoxelBytes + 352) / static_cast<double>(file_size),
        isal ? "in" : "not in", static_cast<int>(volshard::detail::kIsalMinRatio),
        static_cast<int>(volshard::detail::kIsalMaxRatio), isal ? "ISA-L" : "libdeflate");
  }
  std::filesystem::remove_all(dir);
  return status;
}
