// Reading NIfTI files from disk and writing them atomically.

#include <fcntl.h>
#include <libdeflate.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>

#include "gzip.h"
#include "nifti_layout.h"
#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/core/limits.h"
#include "volshard/volume_io/nifti_header.h"

namespace volshard {
namespace {

void put(std::vector<uint8_t>& b, size_t offset, const void* value, size_t n) {
  std::memcpy(b.data() + offset, value, n);  // little-endian hosts only (checked below)
}
void put_i16(std::vector<uint8_t>& b, size_t o, int64_t v) {
  const auto x = static_cast<int16_t>(v);
  put(b, o, &x, 2);
}
void put_i32(std::vector<uint8_t>& b, size_t o, int64_t v) {
  const auto x = static_cast<int32_t>(v);
  put(b, o, &x, 4);
}
void put_i64(std::vector<uint8_t>& b, size_t o, int64_t v) { put(b, o, &v, 8); }
void put_f32(std::vector<uint8_t>& b, size_t o, double v) {
  const auto x = static_cast<float>(v);
  put(b, o, &x, 4);
}
void put_f64(std::vector<uint8_t>& b, size_t o, double v) { put(b, o, &v, 8); }

struct Qform {
  bool representable = false;
  double qfac = 1;
  double b = 0, c = 0, d = 0;
  double zooms[3] = {1, 1, 1};
};

double det3(const double m[3][3]) {
  return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
         m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
         m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
}

// nibabel's Nifti1Header.set_qform: zooms = column norms, qfac from the
// determinant, the nearest orthogonal matrix (polar decomposition; nibabel
// uses an SVD, we iterate Q <- (Q + Q^-T) / 2 as nifti_clib does: the same
// matrix), then the quaternion with a >= 0.
Qform qform_from_affine(const Affine& a) {
  Qform q;
  double r[3][3];
  for (int j = 0; j < 3; ++j) {
    const double n = std::sqrt(a[0][j] * a[0][j] + a[1][j] * a[1][j] + a[2][j] * a[2][j]);
    if (!(n > 0) || !std::isfinite(n)) return q;
    q.zooms[j] = n;
    for (int i = 0; i < 3; ++i) r[i][j] = a[i][j] / n;
  }
  if (det3(r) < 0) {
    q.qfac = -1;
    for (int i = 0; i < 3; ++i) r[i][2] = -r[i][2];
  }
  if (!(std::abs(det3(r)) > 1e-8)) return q;
  for (int iter = 0; iter < 100; ++iter) {
    // inverse transpose via the adjugate
    const double det = det3(r);
    double it[3][3];
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        const int i1 = (i + 1) % 3, i2 = (i + 2) % 3, j1 = (j + 1) % 3, j2 = (j + 2) % 3;
        it[i][j] = (r[i1][j1] * r[i2][j2] - r[i1][j2] * r[i2][j1]) / det;  // cofactor / det = inv^T
      }
    }
    double change = 0;
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        const double v = 0.5 * (r[i][j] + it[i][j]);
        change = std::max(change, std::abs(v - r[i][j]));
        r[i][j] = v;
      }
    }
    if (change < 1e-15) break;
  }
  const double r11 = r[0][0], r12 = r[0][1], r13 = r[0][2];
  const double r21 = r[1][0], r22 = r[1][1], r23 = r[1][2];
  const double r31 = r[2][0], r32 = r[2][1], r33 = r[2][2];
  double qa = r11 + r22 + r33 + 1, qb, qc, qd;
  if (qa > 0.5) {
    qa = 0.5 * std::sqrt(qa);
    qb = 0.25 * (r32 - r23) / qa;
    qc = 0.25 * (r13 - r31) / qa;
    qd = 0.25 * (r21 - r12) / qa;
  } else {
    const double xd = 1 + r11 - (r22 + r33), yd = 1 + r22 - (r11 + r33), zd = 1 + r33 - (r11 + r22);
    if (xd > 1) {
      qb = 0.5 * std::sqrt(xd);
      qc = 0.25 * (r12 + r21) / qb;
      qd = 0.25 * (r13 + r31) / qb;
      qa = 0.25 * (r32 - r23) / qb;
    } else if (yd > 1) {
      qc = 0.5 * std::sqrt(yd);
      qb = 0.25 * (r12 + r21) / qc;
      qd = 0.25 * (r23 + r32) / qc;
      qa = 0.25 * (r13 - r31) / qc;
    } else {
      qd = 0.5 * std::sqrt(zd);
      qb = 0.25 * (r13 + r31) / qd;
      qc = 0.25 * (r23 + r32) / qd;
      qa = 0.25 * (r21 - r12) / qd;
    }
    if (qa < 0) {
      qb = -qb;
      qc = -qc;
      qd = -qd;
    }
  }
  q.b = qb;
  q.c = qc;
  q.d = qd;
  q.representable = true;
  return q;
}

}  // namespace

std::vector<uint8_t> encode_nifti_header(const NiftiWriteSpec& spec) {
  {
    const uint16_t one = 1;
    uint8_t first;
    std::memcpy(&first, &one, 1);
    if (first != 1)
      throw std::logic_error("encode_nifti_header: big-endian hosts are not supported");
  }
  if (spec.version != 1 && spec.version != 2) {
    throw std::invalid_argument("NiftiWriteSpec: version=" + std::to_string(spec.version) +
                                " must be 1 or 2");
  }
  const auto ndim = static_cast<int64_t>(spec.shape.size());
  if (ndim < 1 || ndim > 7) {
    throw std::invalid_argument("NiftiWriteSpec: shape has " + std::to_string(ndim) +
                                " dims, must have 1..7");
  }
  for (int64_t i = 0; i < ndim; ++i) {
    const int64_t d = spec.shape[static_cast<size_t>(i)];
    const int64_t max = spec.version == 1 ? 32767 : std::numeric_limits<int64_t>::max();
    if (d < 1 || d > max) {
      throw std::invalid_argument(
          "NiftiWriteSpec: shape[" + std::to_string(i) + "]=" + std::to_string(d) +
          " must be in [1, " + std::to_string(max) + "]" +
          (spec.version == 1 ? " (NIfTI-1 stores int16 dims; use version=2)" : ""));
    }
  }
  if (!spec.spacing_mm.empty() && spec.spacing_mm.size() != 3) {
    throw std::invalid_argument("NiftiWriteSpec: spacing_mm has " +
                                std::to_string(spec.spacing_mm.size()) +
                                " values, must have 0 or 3");
  }
  const bool scaled = std::isfinite(spec.scl_slope) && spec.scl_slope != 0;
  if (scaled && !std::isfinite(spec.scl_inter)) {
    throw std::invalid_argument("NiftiWriteSpec: scl_inter=" + std::to_string(spec.scl_inter) +
                                " must be finite when scl_slope=" + std::to_string(spec.scl_slope) +
                                " (readers refuse the file)");
  }
  const Affine& a = spec.affine;
  Qform q = qform_from_affine(a);
  double zooms[3] = {q.zooms[0], q.zooms[1], q.zooms[2]};
  if (!spec.spacing_mm.empty()) {
    for (int i = 0; i < 3; ++i) zooms[i] = spec.spacing_mm[static_cast<size_t>(i)];
  }
  const bool v1 = spec.version == 1;
  // Check that the stored qform (in the header's precision) reproduces the
  // affine; shear cannot be represented, and then the qform is left unknown.
  int64_t qform_code = 0;
  if (q.representable) {
    NiftiHeader h;
    h.version = spec.version;
    auto stored = [&](double v) { return v1 ? static_cast<double>(static_cast<float>(v)) : v; };
    h.quatern_b = stored(q.b);
    h.quatern_c = stored(q.c);
    h.quatern_d = stored(q.d);
    h.pixdim = {q.qfac, stored(q.zooms[0]), stored(q.zooms[1]), stored(q.zooms[2]), 1, 1, 1, 1};
    h.qoffset_x = stored(a[0][3]);
    h.qoffset_y = stored(a[1][3]);
    h.qoffset_z = stored(a[2][3]);
    try {
      const Affine back = nifti_qform_affine(h);
      double err = 0, scale = 1;
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 4; ++j) {
          err = std::max(err, std::abs(back[i][j] - a[i][j]));
          scale = std::max(scale, std::abs(a[i][j]));
        }
      }
      if (err <= 1e-5 * scale) qform_code = 2;
    } catch (const std::runtime_error&) {
    }
  }
  if (qform_code == 0) q = Qform{};

  // One pass over the version's layout (nifti_layout.h, the reader's table):
  // integers and reals take the width the version gives them.
  const detail::NiftiLayout& L = detail::nifti_layout(spec.version);
  std::vector<uint8_t> b(static_cast<size_t>(L.header_size) + 4, 0);
  const auto put_int = [&b](size_t offset, size_t width, int64_t v) {
    if (width == 1) {
      b[offset] = static_cast<uint8_t>(v);
    } else if (width == 2) {
      put_i16(b, offset, v);
    } else if (width == 4) {
      put_i32(b, offset, v);
    } else {
      put_i64(b, offset, v);
    }
  };
  const auto put_real = [&](size_t offset, double v) {
    if (L.real_size == 4) {
      put_f32(b, offset, v);
    } else {
      put_f64(b, offset, v);
    }
  };
  put_i32(b, 0, L.header_size);
  if (v1) {
    std::memcpy(b.data() + L.magic, "n+1", 4);
  } else {
    std::memcpy(b.data() + L.magic, "n+2\0\r\n\032\n", 8);
  }
  put_int(L.dim, L.dim_size, ndim);
  for (size_t i = 1; i < 8; ++i)
    put_int(L.dim + L.dim_size * i, L.dim_size,
            static_cast<int64_t>(i) <= ndim ? spec.shape[i - 1] : 1);
  put_i16(b, L.datatype, static_cast<int64_t>(spec.datatype));
  put_i16(b, L.bitpix, element_size(spec.datatype) * 8);
  put_real(L.pixdim, q.qfac);
  for (size_t i = 1; i < 8; ++i) put_real(L.pixdim + L.real_size * i, i <= 3 ? zooms[i - 1] : 1.0);
  if (v1) {  // NIfTI-1 keeps vox_offset as a float32, NIfTI-2 as an int64
    put_f32(b, L.vox_offset, static_cast<double>(L.vox_offset_written));
  } else {
    put_i64(b, L.vox_offset, L.vox_offset_written);
  }
  put_real(L.scl_slope, spec.scl_slope);
  put_real(L.scl_inter, spec.scl_inter);
  put_int(L.xyzt_units, L.xyzt_units_size, 2);  // mm
  std::memcpy(b.data() + L.descrip, spec.descrip.data(), std::min<size_t>(spec.descrip.size(), 79));
  put_int(L.qform_code, L.code_size, qform_code);
  put_int(L.sform_code, L.code_size, 2);  // aligned, as nibabel writes
  put_real(L.quatern, q.b);
  put_real(L.quatern + L.real_size, q.c);
  put_real(L.quatern + 2 * L.real_size, q.d);
  for (size_t i = 0; i < 3; ++i) put_real(L.qoffset() + L.real_size * i, a[i][3]);
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 4; ++c) put_real(L.srow + L.real_size * (4 * r + c), a[r][c]);
  return b;
}

std::vector<uint8_t> gzip_compress(const uint8_t* data, size_t size, int level) {
  if (level < 1 || level > 12) {
    throw std::invalid_argument("gzip_compress: level=" + std::to_string(level) +
                                " must be in 1..12");
  }
  std::unique_ptr<libdeflate_compressor, void (*)(libdeflate_compressor*)> c(
      libdeflate_alloc_compressor(level), libdeflate_free_compressor);
  if (!c) throw std::bad_alloc();
  std::vector<uint8_t> out(libdeflate_gzip_compress_bound(c.get(), size));
  const size_t n = libdeflate_gzip_compress(c.get(), data, size, out.data(), out.size());
  if (n == 0) throw std::runtime_error("gzip_compress: libdeflate failed");
  out.resize(n);
  return out;
}

void write_nifti(const std::string& path, const NiftiWriteSpec& spec, const void* voxels,
                 size_t size, const NiftiWriteOptions& options) {
  const std::vector<uint8_t> header = encode_nifti_header(spec);
  uint64_t expected = static_cast<uint64_t>(element_size(spec.datatype));
  for (const int64_t d : spec.shape) expected *= static_cast<uint64_t>(d);
  if (expected != size) {
    throw std::invalid_argument("write_nifti: " + path + ": " + std::to_string(size) +
                                " voxel bytes given, shape and " + to_string(spec.datatype) +
                                " need " + std::to_string(expected));
  }
  int level = options.gzip_level;
  if (level < 0) {
    level = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0 ? 1 : 0;
  }
  if (level == 0) {
    write_file_atomic(path, {header.data(), voxels}, {header.size(), size});
    return;
  }
  ByteBuffer whole = ByteBuffer::allocate(header.size() + size);
  std::memcpy(whole.data.get(), header.data(), header.size());
  if (size > 0) std::memcpy(whole.data.get() + header.size(), voxels, size);
  const std::vector<uint8_t> gz = gzip_compress(whole.data.get(), whole.size, level);
  write_file_atomic(path, {gz.data()}, {gz.size()});
}

void throw_read_out_of_memory(const std::string& path, const std::bad_alloc& e) {
  // Named already (read_nifti's own, passing through read_volume): as it is.
  const auto* known = dynamic_cast<const OutOfMemoryError*>(&e);
  if (known != nullptr && std::string(known->what()).rfind(path + ": ", 0) == 0) throw *known;
  std::string context = path;
  try {
    const NiftiHeader h = read_nifti_header(path);
    std::string dims;
    for (const int64_t d : h.shape) dims += (dims.empty() ? "" : " x ") + std::to_string(d);
    context += ": its header gives " + dims + " " + to_string(h.datatype) + " voxels (" +
               bytes_text(static_cast<double>(h.data_bytes())) + ")";
  } catch (const std::exception&) {  // the header was read once; if not now, the file alone
  }
  throw OutOfMemoryError(context, e);
}

namespace {

NiftiFile read_nifti_unguarded(const std::string& path, const NiftiReadOptions& options) {
  int64_t file_size = 0;
  Fd fd = open_for_reading(path, &file_size);
  uint8_t head[540];
  const auto head_size = static_cast<size_t>(std::min<int64_t>(file_size, 540));
  read_exactly(fd.get(), head, head_size, 0, path);
  if (detail::is_gzip(head, head_size)) {
    ByteBuffer all = ByteBuffer::allocate(static_cast<size_t>(file_size));
    read_exactly(fd.get(), all.data.get(), all.size, 0, path);
    return parse_nifti_file(all.data.get(), all.size, path, options);
  }
  NiftiFile file;
  file.path = path;
  file.header = parse_nifti_header(head, head_size, path, file_size, options);
  const auto needed = static_cast<size_t>(file.header.vox_offset + file.header.data_bytes());
  file.bytes = ByteBuffer::allocate(needed);
  read_exactly(fd.get(), file.bytes.data.get(), needed, 0, path);
  return file;
}

}  // namespace

NiftiFile read_nifti(const std::string& path, const NiftiReadOptions& options) {
  try {
    return read_nifti_unguarded(path, options);
  } catch (const std::bad_alloc& e) {
    throw_read_out_of_memory(path, e);
  }
}

NiftiHeader read_nifti_header(const std::string& path, const NiftiReadOptions& options) {
  int64_t file_size = 0;
  Fd fd = open_for_reading(path, &file_size);
  uint8_t head[540];
  const auto head_size = static_cast<size_t>(std::min<int64_t>(file_size, 540));
  read_exactly(fd.get(), head, head_size, 0, path);
  if (!detail::is_gzip(head, head_size))
    return parse_nifti_header(head, head_size, path, file_size, options);
  // Inflate only the start: read compressed chunks until 540 bytes come out.
  std::vector<uint8_t> compressed;
  size_t chunk = 4096;
  for (;;) {
    const auto want = static_cast<size_t>(
        std::min<int64_t>(file_size, static_cast<int64_t>(compressed.size() + chunk)));
    const size_t old = compressed.size();
    compressed.resize(want);
    read_exactly(fd.get(), compressed.data() + old, want - old, static_cast<int64_t>(old), path);
    std::vector<uint8_t> prefix;
    try {
      prefix = detail::gunzip_prefix(compressed.data(), compressed.size(), 540, path);
    } catch (const std::runtime_error&) {
      if (static_cast<int64_t>(compressed.size()) == file_size) throw;
      chunk *= 4;  // a cut inside a block can read as corrupt; read more
      continue;
    }
    if (prefix.size() >= 540 || static_cast<int64_t>(compressed.size()) == file_size) {
      return parse_nifti_header(prefix.data(), prefix.size(), path, -1, options);
    }
    chunk *= 4;
  }
}

}  // namespace volshard
