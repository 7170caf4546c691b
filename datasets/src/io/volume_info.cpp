#include "volshard/datasets/volume_info.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace volshard {
namespace {

// One pass over the voxels in their own type (std only, so that `volshard
// info` runs without LibTorch): values scaled as nibabel's apply_read_scaling,
// NaN/Inf counted and skipped.
template <class T>
void accumulate(const NiftiFile& file, VolumeInfo& info) {
  const NiftiHeader& h = file.header;
  const bool swap = h.big_endian != (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
  const bool scale = h.has_scaling();
  const double slope = h.scl_slope;
  const double inter = h.scl_inter;
  const uint8_t* p = file.voxels();
  const int64_t n = h.num_voxels();
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i, p += sizeof(T)) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, p, sizeof(T));
    if (swap) std::reverse(raw, raw + sizeof(T));
    T x;
    std::memcpy(&x, raw, sizeof(T));
    double v = static_cast<double>(x);
    if (scale) {
      if (slope != 1) v *= slope;
      if (inter != 0) v += inter;
    }
    if (!std::isfinite(v)) {
      ++info.nonfinite;
      continue;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    ++finite;
  }
  if (finite > 0) {
    info.min = lo;
    info.max = hi;
    info.sum = sum;
    info.mean = sum / static_cast<double>(finite);
  }
}

}  // namespace

VolumeInfo describe_volume(const std::string& path) {
  const NiftiFile file = read_nifti(path);
  const NiftiHeader& h = file.header;
  VolumeInfo info;
  info.path = path;
  info.shape = h.shape;
  info.dtype = to_string(h.datatype);
  info.version = h.version;
  info.spacing_mm = h.spacing_mm();
  info.affine = h.affine;
  info.scaled = h.has_scaling();
  switch (h.datatype) {
    case NiftiDatatype::kUint8:
      accumulate<uint8_t>(file, info);
      break;
    case NiftiDatatype::kInt8:
      accumulate<int8_t>(file, info);
      break;
    case NiftiDatatype::kInt16:
      accumulate<int16_t>(file, info);
      break;
    case NiftiDatatype::kUint16:
      accumulate<uint16_t>(file, info);
      break;
    case NiftiDatatype::kInt32:
      accumulate<int32_t>(file, info);
      break;
    case NiftiDatatype::kUint32:
      accumulate<uint32_t>(file, info);
      break;
    case NiftiDatatype::kInt64:
      accumulate<int64_t>(file, info);
      break;
    case NiftiDatatype::kFloat32:
      accumulate<float>(file, info);
      break;
    case NiftiDatatype::kFloat64:
      accumulate<double>(file, info);
      break;
  }
  return info;
}

std::string to_json(const VolumeInfo& info) {
  nlohmann::ordered_json doc = {{"path", info.path},
                                {"shape", info.shape},
                                {"dtype", info.dtype},
                                {"nifti_version", info.version},
                                {"spacing_mm", info.spacing_mm},
                                {"affine", info.affine},
                                {"scaled", info.scaled},
                                {"min", info.min},
                                {"max", info.max},
                                {"mean", info.mean},
                                {"sum", info.sum},
                                {"nonfinite", info.nonfinite}};
  return doc.dump();
}

std::string to_text(const VolumeInfo& info) {
  std::ostringstream os;
  os << info.path << "\n  shape";
  for (size_t k = 0; k < info.shape.size(); ++k) os << (k ? " x " : " ") << info.shape[k];
  os << "  " << info.dtype << (info.scaled ? " (scaled)" : "") << "  NIfTI-" << info.version
     << "\n  spacing " << info.spacing_mm[0] << " x " << info.spacing_mm[1] << " x "
     << info.spacing_mm[2] << " mm\n";
  os << std::setprecision(6);
  for (const auto& row : info.affine) {
    os << "  affine";
    for (double x : row) os << ' ' << std::setw(10) << x;
    os << '\n';
  }
  os << "  min " << info.min << "  max " << info.max << "  mean " << info.mean << "  sum "
     << info.sum;
  if (info.nonfinite > 0) os << "  non-finite voxels " << info.nonfinite;
  os << '\n';
  return os.str();
}

}  // namespace volshard
