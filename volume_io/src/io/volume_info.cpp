#include "volshard/volume_io/volume_info.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bitset>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "volshard/core/error.h"
#include "volshard/core/orientation.h"

namespace volshard {

namespace {

constexpr size_t kMaxLabels = 256;  // more distinct values than this: not a label file

// The distinct values of an integer volume, up to kMaxLabels.
class LabelSet {
 public:
  void add(int64_t v) {
    if (v == last_ && any_) return;  // labels come in long runs
    any_ = true;
    last_ = v;
    if (v >= -128 && v < 128) {
      small_.set(static_cast<size_t>(v + 128));
      return;
    }
    if (over_) return;
    const auto it = std::lower_bound(large_.begin(), large_.end(), v);
    if (it != large_.end() && *it == v) return;
    if (large_.size() + small_.count() >= kMaxLabels) {
      over_ = true;
      return;
    }
    large_.insert(it, v);
  }
  std::vector<int64_t> values() const {
    std::vector<int64_t> out;
    for (size_t k = 0; k < 256; ++k)
      if (small_.test(k)) out.push_back(static_cast<int64_t>(k) - 128);
    out.insert(out.end(), large_.begin(), large_.end());
    std::sort(out.begin(), out.end());
    return out;
  }
  bool complete() const { return !over_ && small_.count() + large_.size() <= kMaxLabels; }

 private:
  std::bitset<256> small_;  // -128 .. 127
  std::vector<int64_t> large_;
  int64_t last_ = 0;
  bool any_ = false, over_ = false;
};

// One pass over the voxels in their own type, straight from the decompressed
// file (std only, so that `volshard info` runs without LibTorch; no float
// copy): values scaled as nibabel's apply_read_scaling (x * slope, then +
// inter when inter != 0, in float64), NaN/Inf counted and skipped, an
// unscaled integer file's distinct values collected.
template <class T>
void scan(const NiftiFile& file, VolumeInfo& info) {
  const NiftiHeader& h = file.header;
  const bool swap = h.big_endian != (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
  const bool scale = h.has_scaling();
  const double slope = h.scl_slope, inter = h.scl_inter;
  const uint8_t* p = file.voxels();
  const int64_t n = h.num_voxels();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  long double sum = 0;
  int64_t finite = 0;
  LabelSet labels;
  const bool integer = std::is_integral_v<T> && !scale;
  // Float or scaled data whose every finite value is an integer (labels
  // saved as float32, as two of the Decathlon's Hippocampus labels are) list
  // their values too; the first fraction ends the listing.
  bool whole = !integer;
  for (int64_t k = 0; k < n; ++k, p += sizeof(T)) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, p, sizeof(T));
    if (swap) std::reverse(raw, raw + sizeof(T));
    T x;
    std::memcpy(&x, raw, sizeof(T));
    double v = static_cast<double>(x);
    if (scale) {
      v *= slope;
      if (inter != 0) v += inter;
    }
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    ++finite;
    if (integer) {
      labels.add(static_cast<int64_t>(x));
    } else if (whole) {
      whole = v == std::floor(v) && std::abs(v) <= 9007199254740992.0;  // 2^53
      if (whole) labels.add(static_cast<int64_t>(v));
    }
  }
  info.nonfinite = n - finite;
  if (finite > 0) {
    info.min = lo;
    info.max = hi;
    info.sum = static_cast<double>(sum);
    info.mean = static_cast<double>(sum / static_cast<long double>(finite));
  }
  if (integer || (whole && finite > 0)) {
    info.labels = labels.values();
    info.labels_complete = labels.complete();
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
  info.orientation = axcodes(h.affine);
  info.scaled = h.has_scaling();
  switch (h.datatype) {
    case NiftiDatatype::kUint8:
      scan<uint8_t>(file, info);
      break;
    case NiftiDatatype::kInt8:
      scan<int8_t>(file, info);
      break;
    case NiftiDatatype::kInt16:
      scan<int16_t>(file, info);
      break;
    case NiftiDatatype::kUint16:
      scan<uint16_t>(file, info);
      break;
    case NiftiDatatype::kInt32:
      scan<int32_t>(file, info);
      break;
    case NiftiDatatype::kUint32:
      scan<uint32_t>(file, info);
      break;
    case NiftiDatatype::kInt64:
      scan<int64_t>(file, info);
      break;
    case NiftiDatatype::kFloat32:
      scan<float>(file, info);
      break;
    case NiftiDatatype::kFloat64:
      scan<double>(file, info);
      break;
  }
  return info;
}

std::string to_json(const VolumeInfo& info) {
  nlohmann::ordered_json doc = {{"path", printable(info.path)},
                                {"shape", info.shape},
                                {"dtype", info.dtype},
                                {"nifti_version", info.version},
                                {"spacing_mm", info.spacing_mm},
                                {"affine", info.affine},
                                {"orientation", info.orientation},
                                {"scaled", info.scaled},
                                {"min", info.min},
                                {"max", info.max},
                                {"mean", info.mean},
                                {"sum", info.sum},
                                {"nonfinite", info.nonfinite}};
  if (info.labels) {
    doc["labels"] = *info.labels;
    doc["labels_complete"] = info.labels_complete;
  } else {
    doc["labels"] = nullptr;
  }
  return doc.dump();
}

std::string to_text(const VolumeInfo& info) {
  std::ostringstream os;
  os << printable(info.path) << "\n  shape";
  for (size_t k = 0; k < info.shape.size(); ++k) os << (k ? " x " : " ") << info.shape[k];
  os << "  " << info.dtype << (info.scaled ? " (scaled)" : "") << "  NIfTI-" << info.version
     << "\n  spacing " << info.spacing_mm[0] << " x " << info.spacing_mm[1] << " x "
     << info.spacing_mm[2] << " mm  orientation " << info.orientation << "\n";
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
  if (info.labels) {
    os << "  values";
    const size_t shown = std::min<size_t>(info.labels->size(), 32);
    for (size_t k = 0; k < shown; ++k) os << ' ' << (*info.labels)[k];
    if (shown < info.labels->size()) os << " ... (" << info.labels->size() << " in all)";
    if (!info.labels_complete) os << " ... (more than " << kMaxLabels << " distinct)";
    os << '\n';
  }
  return os.str();
}

}  // namespace volshard
