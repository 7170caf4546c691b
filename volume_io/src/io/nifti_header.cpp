#include "volshard/volume_io/nifti_header.h"
#include "volshard/core/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "gzip.h"
#include "nifti_layout.h"

namespace volshard {
namespace {

constexpr int64_t kNifti1HeaderSize = detail::kNifti1Layout.header_size;
constexpr int64_t kNifti2HeaderSize = detail::kNifti2Layout.header_size;
// nibabel's single_vox_offset: header + the 4 extension-flag bytes.
constexpr int64_t kNifti1MinVoxOffset = detail::kNifti1Layout.vox_offset_written;
constexpr int64_t kNifti2MinVoxOffset = detail::kNifti2Layout.vox_offset_written;

std::string fmt(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// Little/big-endian field access, bounds-checked by the callers (the header
// is at least header_size bytes before any field is read).
class FieldReader {
 public:
  FieldReader(const uint8_t* data, bool big_endian) : data_(data), big_(big_endian) {}

  uint64_t raw(size_t offset, size_t n) const {
    uint64_t v = 0;
    if (big_) {
      for (size_t i = 0; i < n; ++i) v = (v << 8) | data_[offset + i];
    } else {
      for (size_t i = n; i-- > 0;) v = (v << 8) | data_[offset + i];
    }
    return v;
  }
  int64_t i16(size_t offset) const { return static_cast<int16_t>(raw(offset, 2)); }
  int64_t i32(size_t offset) const { return static_cast<int32_t>(raw(offset, 4)); }
  int64_t i64(size_t offset) const { return static_cast<int64_t>(raw(offset, 8)); }
  double f32(size_t offset) const {
    const auto bits = static_cast<uint32_t>(raw(offset, 4));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  double f64(size_t offset) const {
    const uint64_t bits = raw(offset, 8);
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  std::string str(size_t offset, size_t n) const {
    const char* p = reinterpret_cast<const char*>(data_ + offset);
    return std::string(p, strnlen(p, n));
  }
  uint8_t byte(size_t offset) const { return data_[offset]; }

 private:
  const uint8_t* data_;
  bool big_;
};

bool supported_datatype(int64_t code) {
  switch (code) {
    case 2:
    case 4:
    case 8:
    case 16:
    case 64:
    case 256:
    case 512:
    case 768:
    case 1024:
      return true;
    default:
      return false;
  }
}

std::string datatype_name(int64_t code) {
  switch (code) {
    case 0:
      return "unknown";
    case 1:
      return "binary";
    case 32:
      return "complex64";
    case 128:
      return "RGB24";
    case 1536:
      return "float128";
    case 1792:
      return "complex128";
    case 2048:
      return "complex256";
    case 2304:
      return "RGBA32";
    default:
      if (supported_datatype(code)) return to_string(static_cast<NiftiDatatype>(code));
      return "not a NIfTI code";
  }
}

int32_t bswap32(int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  return static_cast<int32_t>((u >> 24) | ((u >> 8) & 0xff00u) | ((u << 8) & 0xff0000u) |
                              (u << 24));
}

}  // namespace

std::string to_string(NiftiDatatype type) {
  switch (type) {
    case NiftiDatatype::kUint8:
      return "uint8";
    case NiftiDatatype::kInt16:
      return "int16";
    case NiftiDatatype::kInt32:
      return "int32";
    case NiftiDatatype::kFloat32:
      return "float32";
    case NiftiDatatype::kFloat64:
      return "float64";
    case NiftiDatatype::kInt8:
      return "int8";
    case NiftiDatatype::kUint16:
      return "uint16";
    case NiftiDatatype::kUint32:
      return "uint32";
    case NiftiDatatype::kInt64:
      return "int64";
  }
  return "datatype " + std::to_string(static_cast<int>(type));
}

int64_t element_size(NiftiDatatype type) {
  switch (type) {
    case NiftiDatatype::kUint8:
    case NiftiDatatype::kInt8:
      return 1;
    case NiftiDatatype::kInt16:
    case NiftiDatatype::kUint16:
      return 2;
    case NiftiDatatype::kInt32:
    case NiftiDatatype::kUint32:
    case NiftiDatatype::kFloat32:
      return 4;
    case NiftiDatatype::kFloat64:
    case NiftiDatatype::kInt64:
      return 8;
  }
  return 1;
}

bool is_floating(NiftiDatatype type) {
  return type == NiftiDatatype::kFloat32 || type == NiftiDatatype::kFloat64;
}

int64_t NiftiHeader::num_voxels() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;  // checked against overflow when parsed
  return n;
}

bool NiftiHeader::has_scaling() const {
  if (!std::isfinite(scl_slope) || scl_slope == 0) return false;
  return !(scl_slope == 1 && scl_inter == 0);
}

Affine nifti_base_affine(const NiftiHeader& h) {
  // nibabel.volumeutils.shape_zoom_affine(dim[1:ndim+1], pixdim[1:ndim+1],
  // x_flip=True): raw dims (no FreeSurfer hack), dims beyond 3 ignored,
  // missing ones 1.
  const int64_t ndim = h.dim[0];
  Affine a{};
  for (int r = 0; r < 4; ++r) a[r][r] = 1;
  for (int axis = 0; axis < 3; ++axis) {
    const double size = axis < ndim ? static_cast<double>(h.dim[axis + 1]) : 1.0;
    double zoom = axis < ndim ? h.pixdim[axis + 1] : 1.0;
    if (axis == 0) zoom = -zoom;
    const double origin = (size - 1) / 2.0;
    a[axis][axis] = zoom;
    a[axis][3] = -origin * zoom;
  }
  return a;
}

Affine nifti_qform_affine(const NiftiHeader& h) {
  // nibabel: fillpositive([b, c, d], threshold) in np.longdouble, quat2mat,
  // then M = R @ diag(pixdim[1], pixdim[2], pixdim[3] * qfac), cast to float64.
  using LD = long double;
  const LD b = h.quatern_b, c = h.quatern_c, d = h.quatern_d;
  const LD w2 = 1.0L - (((0.0L + b * b) + c * c) + d * d);
  const LD threshold = h.version == 1
                           ? -static_cast<LD>(std::numeric_limits<float>::epsilon()) * 3
                           : -static_cast<LD>(std::numeric_limits<double>::epsilon()) * 3;
  LD w = 0;
  if (w2 < 0) {
    if (w2 < threshold) {
      throw std::runtime_error("quatern_b,c,d=(" + fmt(h.quatern_b) + ", " + fmt(h.quatern_c) +
                               ", " + fmt(h.quatern_d) +
                               ") is not a unit quaternion (b^2+c^2+d^2 > 1)");
    }
  } else {
    w = std::sqrt(w2);
  }
  LD rot[3][3];
  const LD nq = w * w + b * b + c * c + d * d;
  if (nq < static_cast<LD>(std::numeric_limits<double>::epsilon())) {
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) rot[i][j] = i == j ? 1 : 0;
  } else {
    const LD s = 2.0L / nq;
    const LD X = b * s, Y = c * s, Z = d * s;
    const LD wX = w * X, wY = w * Y, wZ = w * Z;
    const LD xX = b * X, xY = b * Y, xZ = b * Z;
    const LD yY = c * Y, yZ = c * Z, zZ = d * Z;
    rot[0][0] = 1.0L - (yY + zZ);
    rot[0][1] = xY - wZ;
    rot[0][2] = xZ + wY;
    rot[1][0] = xY + wZ;
    rot[1][1] = 1.0L - (xX + zZ);
    rot[1][2] = yZ - wX;
    rot[2][0] = xZ - wY;
    rot[2][1] = yZ + wX;
    rot[2][2] = 1.0L - (xX + yY);
  }
  // vox[-1] *= qfac in the header's precision (float32 for NIfTI-1).
  double vz = h.pixdim[3] * h.pixdim[0];
  if (h.version == 1)
    vz = static_cast<float>(static_cast<float>(h.pixdim[3]) * static_cast<float>(h.pixdim[0]));
  const LD vox[3] = {h.pixdim[1], h.pixdim[2], vz};
  Affine a{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) a[i][j] = static_cast<double>(rot[i][j] * vox[j]);
  }
  a[0][3] = h.qoffset_x;
  a[1][3] = h.qoffset_y;
  a[2][3] = h.qoffset_z;
  a[3] = {0, 0, 0, 1};
  return a;
}

NiftiHeader parse_nifti_header(const uint8_t* data, size_t size, const std::string& path,
                               int64_t file_size, const NiftiReadOptions& options) {
  if (size < 4) {
    fail_file(path,
              "file is " + std::to_string(size) + " bytes, too short for a NIfTI header (348)");
  }
  NiftiHeader h;
  int32_t sizeof_hdr;
  std::memcpy(&sizeof_hdr, data, 4);
  const bool host_big = [] {
    const uint16_t one = 1;
    uint8_t first;
    std::memcpy(&first, &one, 1);
    return first == 0;
  }();
  if (sizeof_hdr == kNifti1HeaderSize || sizeof_hdr == kNifti2HeaderSize) {
    h.big_endian = host_big;
  } else if (bswap32(sizeof_hdr) == kNifti1HeaderSize || bswap32(sizeof_hdr) == kNifti2HeaderSize) {
    h.big_endian = !host_big;
    sizeof_hdr = bswap32(sizeof_hdr);
  } else {
    fail_file(
        path,
        "sizeof_hdr=" + std::to_string(sizeof_hdr) +
            " is neither 348 (NIfTI-1) nor 540 (NIfTI-2) in either byte order: not a NIfTI file");
  }
  h.version = sizeof_hdr == kNifti1HeaderSize ? 1 : 2;
  h.header_size = sizeof_hdr;
  if (size < static_cast<size_t>(h.header_size)) {
    fail_file(path, "truncated header: " + std::to_string(size) + " bytes, NIfTI-" +
                        std::to_string(h.version) + " needs " + std::to_string(h.header_size));
  }
  const FieldReader f(data, h.big_endian);
  const detail::NiftiLayout& L = detail::nifti_layout(h.version);

  // Magic: single-file only.
  if (h.version == 1) {
    const std::string magic = f.str(L.magic, 4);
    if (magic.empty())
      fail_file(path,
                "an Analyze 7.5 header (sizeof_hdr=348, no NIfTI magic), not NIfTI-1: "
                "convert it to a single .nii (e.g. nibabel.save(nibabel.load(path), 'x.nii'))");
    if (magic == "ni1")
      fail_file(path, "magic=\"ni1\": a .hdr/.img pair header; only single-file .nii is supported");
    if (magic != "n+1")
      fail_file(path, "magic=\"" + printable(magic) + "\" must be \"n+1\" for a NIfTI-1 file");
  } else {
    const std::string magic = f.str(L.magic, 4);
    if (magic == "ni2")
      fail_file(path, "magic=\"ni2\": a .hdr/.img pair header; only single-file .nii is supported");
    if (magic != "n+2")
      fail_file(path, "magic=\"" + printable(magic) + "\" must be \"n+2\" for a NIfTI-2 file");
    const uint8_t eol[4] = {f.byte(8), f.byte(9), f.byte(10), f.byte(11)};
    const bool ok = (eol[0] == 13 && eol[1] == 10 && eol[2] == 26 && eol[3] == 10) ||
                    (eol[0] == 0 && eol[1] == 0 && eol[2] == 0 && eol[3] == 0);
    if (!ok)
      fail_file(path, "magic[4..7] (eol_check) is not 13,10,26,10: corrupted by an EOL conversion");
  }

  auto dim_at = [&](int i) {
    return L.dim_size == 2 ? f.i16(L.dim + 2 * i) : f.i64(L.dim + 8 * i);
  };
  for (int i = 0; i < 8; ++i) h.dim[i] = dim_at(i);
  const int64_t ndim = h.dim[0];
  if (ndim < 1 || ndim > 7) fail_file(path, "dim[0]=" + std::to_string(ndim) + " must be in 1..7");

  // Shape, with nibabel's NIfTI-1 FreeSurfer hacks.
  h.shape.assign(h.dim.begin() + 1, h.dim.begin() + 1 + ndim);
  if (h.version == 1 && ndim >= 3 && h.dim[1] == -1 && h.dim[2] == 1 && h.dim[3] == 1) {
    const int64_t glmin = f.i32(144);
    if (glmin <= 0) {
      fail_file(path, "dim[1]=-1 (FreeSurfer long vector) needs glmin >= 1, got glmin=" +
                          std::to_string(glmin));
    }
    h.shape[0] = glmin;
  } else if (ndim >= 3 && h.dim[1] == 27307 && h.dim[2] == 1 && h.dim[3] == 6) {
    h.shape[0] = 163842;
    h.shape[2] = 1;
  }
  int64_t nvox = 1;
  for (int64_t i = 0; i < ndim; ++i) {
    const int64_t d = h.shape[static_cast<size_t>(i)];
    if (d < 1)
      fail_file(path, "dim[" + std::to_string(i + 1) + "]=" + std::to_string(d) + " must be >= 1");
    if (i >= 4 && d != 1) {
      fail_file(
          path,
          "dim[" + std::to_string(i + 1) + "]=" + std::to_string(d) +
              ": at most 4 dimensions (x, y, z, channels) are supported; dim[5..7] must be 1");
    }
    if (__builtin_mul_overflow(nvox, d, &nvox)) {
      fail_file(path, "dim[1.." + std::to_string(ndim) + "]: the voxel count overflows int64");
    }
  }
  if (nvox > options.max_voxels) {
    fail_file(path, "dim[1.." + std::to_string(ndim) + "]: " + std::to_string(nvox) +
                        " voxels exceed max_voxels=" + std::to_string(options.max_voxels));
  }

  const int64_t datatype = f.i16(L.datatype);
  if (!supported_datatype(datatype)) {
    fail_file(path, "datatype=" + std::to_string(datatype) + " (" + datatype_name(datatype) +
                        ") is not supported; supported: uint8, int8, int16, uint16, int32, uint32, "
                        "int64, float32, float64");
  }
  h.datatype = static_cast<NiftiDatatype>(datatype);
  h.bitpix = f.i16(L.bitpix);

  // vox_offset: float32 in NIfTI-1 (nibabel truncates with int()), int64 in NIfTI-2.
  const int64_t min_offset = h.version == 1 ? kNifti1MinVoxOffset : kNifti2MinVoxOffset;
  if (h.version == 1) {
    const double v = f.f32(L.vox_offset);
    if (!(v >= 0 && v < 9.0e18))
      fail_file(path, "vox_offset=" + fmt(v) + " is not a valid byte offset");
    h.vox_offset = static_cast<int64_t>(v);
  } else {
    h.vox_offset = f.i64(L.vox_offset);
  }
  if (h.vox_offset < min_offset) {
    fail_file(path, "vox_offset=" + std::to_string(h.vox_offset) +
                        " must be >= " + std::to_string(min_offset) + " for a single-file NIfTI-" +
                        std::to_string(h.version));
  }
  const int64_t esize = element_size(h.datatype);
  int64_t data_bytes = 0, end = 0;
  if (__builtin_mul_overflow(nvox, esize, &data_bytes) ||
      __builtin_add_overflow(h.vox_offset, data_bytes, &end)) {
    fail_file(path, "vox_offset=" + std::to_string(h.vox_offset) + " + data size overflows int64");
  }
  if (file_size >= 0) {
    if (h.vox_offset > file_size) {
      fail_file(path, "vox_offset=" + std::to_string(h.vox_offset) +
                          " is beyond the end of the file (" + std::to_string(file_size) +
                          " bytes)");
    }
    if (end > file_size) {
      fail_file(path, "truncated: vox_offset=" + std::to_string(h.vox_offset) + " + " +
                          std::to_string(data_bytes) + " data bytes needs " + std::to_string(end) +
                          " bytes, the file has " + std::to_string(file_size));
    }
  }

  auto real = [&](size_t offset) { return L.real_size == 4 ? f.f32(offset) : f.f64(offset); };
  for (int i = 0; i < 8; ++i) h.pixdim[i] = real(L.pixdim + L.real_size * i);
  h.raw_pixdim = h.pixdim;
  // nibabel's check_fix on load: qfac -> 1 unless +-1; pixdim[1..3]: 0 -> 1, negative -> abs.
  if (h.pixdim[0] != 1 && h.pixdim[0] != -1) h.pixdim[0] = 1;
  for (int i = 1; i <= 3; ++i) {
    if (h.pixdim[i] == 0) h.pixdim[i] = 1;
    if (h.pixdim[i] < 0) h.pixdim[i] = -h.pixdim[i];
  }
  h.scl_slope = real(L.scl_slope);
  h.scl_inter = real(L.scl_inter);
  if (std::isfinite(h.scl_slope) && h.scl_slope != 0 && !std::isfinite(h.scl_inter)) {
    fail_file(path, "scl_inter=" + fmt(h.scl_inter) +
                        " must be finite when scl_slope=" + fmt(h.scl_slope));
  }
  h.cal_max = real(L.cal_max);
  h.cal_min = real(L.cal_min);
  for (int i = 0; i < 3; ++i) h.intent_p[i] = real(L.intent_p + L.real_size * i);
  h.intent_code = L.intent_code_size == 2 ? f.i16(L.intent_code) : f.i32(L.intent_code);
  h.xyzt_units = L.xyzt_units_size == 1 ? f.byte(L.xyzt_units) : f.i32(L.xyzt_units);
  h.intent_name = f.str(L.intent_name, 16);
  h.descrip = f.str(L.descrip, 80);
  auto code = [&](size_t offset) {
    const int64_t c = L.code_size == 2 ? f.i16(offset) : f.i32(offset);
    return (c >= 0 && c <= 5) ? c : 0;  // nibabel: invalid codes -> 0
  };
  h.qform_code = code(L.qform_code);
  h.sform_code = code(L.sform_code);
  h.quatern_b = real(L.quatern);
  h.quatern_c = real(L.quatern + L.real_size);
  h.quatern_d = real(L.quatern + 2 * L.real_size);
  h.qoffset_x = real(L.quatern + 3 * L.real_size);
  h.qoffset_y = real(L.quatern + 4 * L.real_size);
  h.qoffset_z = real(L.quatern + 5 * L.real_size);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) h.srow[r][c] = real(L.srow + L.real_size * (4 * r + c));

  if (h.sform_code != 0) {
    for (int r = 0; r < 3; ++r) h.affine[r] = h.srow[r];
    h.affine[3] = {0, 0, 0, 1};
  } else if (h.qform_code != 0) {
    try {
      h.affine = nifti_qform_affine(h);
    } catch (const std::runtime_error& e) {
      fail_file(path, e.what());
    }
  } else {
    h.affine = nifti_base_affine(h);
  }
  return h;
}

NiftiFile parse_nifti_file(const uint8_t* data, size_t size, const std::string& path,
                           const NiftiReadOptions& options) {
  NiftiFile file;
  file.path = path;
  if (detail::is_gzip(data, size)) {
    const std::vector<uint8_t> prefix = detail::gunzip_prefix(data, size, 540, path);
    file.header = parse_nifti_header(prefix.data(), prefix.size(), path, -1, options);
    const auto needed = static_cast<uint64_t>(file.header.vox_offset + file.header.data_bytes());
    if (needed > static_cast<uint64_t>(size) * detail::kMaxDeflateRatio + 1024)
      detail::fail_short_gzip(data, size, needed, path);
    file.bytes = detail::gunzip_sized(data, size, needed, path);
    return file;
  }
  file.header = parse_nifti_header(data, size, path, static_cast<int64_t>(size), options);
  const auto needed = static_cast<size_t>(file.header.vox_offset + file.header.data_bytes());
  file.bytes = ByteBuffer::allocate(needed);
  std::memcpy(file.bytes.data.get(), data, needed);
  return file;
}

}  // namespace volshard
