#include "volshard/datasets/volume_info.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bitset>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "volshard/core/error.h"
#include "volshard/datasets/volume.h"

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

// One pass over the voxels in their own type (scaled on the fly as nibabel
// scales: x * slope, then + inter when inter != 0, in float64).
template <class T>
void scan(const T* p, int64_t n, bool scale, double slope, double inter, VolumeInfo& info) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  long double sum = 0;
  int64_t finite = 0;
  LabelSet labels;
  const bool integer = std::is_integral_v<T> && !scale;
  for (int64_t k = 0; k < n; ++k) {
    double v = static_cast<double>(p[k]);
    if (scale) {
      v *= slope;
      if (inter != 0) v += inter;
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(v)) continue;
    } else if (scale && !std::isfinite(v)) {
      continue;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    ++finite;
    if (integer) labels.add(static_cast<int64_t>(p[k]));
  }
  info.nonfinite = n - finite;
  if (finite > 0) {
    info.min = lo;
    info.max = hi;
    info.sum = static_cast<double>(sum);
    info.mean = static_cast<double>(sum / static_cast<long double>(finite));
  }
  if (integer) {
    info.labels = labels.values();
    info.labels_complete = labels.complete();
  }
}

}  // namespace

std::string orientation_codes(const Affine& affine) {
  // nibabel's io_orientation + ornt2axcodes: each voxel axis in turn takes
  // the world axis its column moves along most (of those not yet taken), the
  // sign giving the direction. (nibabel first removes shear by a polar
  // decomposition; for an affine without shear the result is the same.)
  static const char kCodes[3][2] = {{'L', 'R'}, {'P', 'A'}, {'I', 'S'}};
  std::string out;
  bool taken[3] = {false, false, false};
  for (int in = 0; in < 3; ++in) {
    double norm = 0;
    for (int r = 0; r < 3; ++r) norm += affine[r][in] * affine[r][in];
    norm = std::sqrt(norm);
    int best = -1;
    double best_abs = 0;
    for (int r = 0; r < 3; ++r) {
      const double a = norm > 0 ? std::abs(affine[r][in]) / norm : 0;
      if (!taken[r] && a > best_abs + 1e-12) best = r, best_abs = a;
    }
    if (best < 0) {
      out += '?';
      continue;
    }
    taken[best] = true;
    out += kCodes[best][affine[best][in] > 0 ? 1 : 0];
  }
  return out;
}

VolumeInfo describe_volume(const std::string& path) {
  // The voxels as stored (a view of the decompressed file where the type
  // needs no conversion), scaled while they are summed: no float copy.
  ReadOptions ro;
  ro.layout = VolumeLayout::kFileOrderView;
  ro.apply_scaling = false;
  ro.count_nonfinite = false;
  const Volume v = read_volume(path, ro);
  VolumeInfo info;
  info.path = path;
  info.shape = v.header.shape;
  info.dtype = to_string(v.disk_dtype);
  info.version = v.header.version;
  info.spacing_mm = v.spacing_mm;
  info.affine = v.affine;
  info.orientation = orientation_codes(v.affine);
  info.scaled = v.header.has_scaling();
  // A file-order view is a permutation of dense storage: its elements are the
  // numel() values from data_ptr() on, in some order, which a sum ignores.
  const at::Tensor x = v.data.is_non_overlapping_and_dense() ? v.data : v.data.contiguous();
  AT_DISPATCH_ALL_TYPES(x.scalar_type(), "describe_volume", [&] {
    scan(x.data_ptr<scalar_t>(), x.numel(), info.scaled, v.header.scl_slope, v.header.scl_inter,
         info);
  });
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
