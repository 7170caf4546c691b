#include "volshard/datasets/volume_info.h"

#include <ATen/ATen.h>

#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "volshard/datasets/volume.h"

namespace volshard {

VolumeInfo describe_volume(const std::string& path) {
  const Volume v = read_volume(path);
  VolumeInfo info;
  info.path = path;
  info.shape = v.header.shape;
  info.dtype = to_string(v.disk_dtype);
  info.version = v.header.version;
  info.spacing_mm = v.spacing_mm;
  info.affine = v.affine;
  info.scaled = v.header.has_scaling();
  const at::Tensor x = v.data.to(at::kDouble);
  const at::Tensor finite = at::isfinite(x);
  info.nonfinite = x.numel() - finite.sum().item<int64_t>();
  const at::Tensor values = info.nonfinite > 0 ? x.masked_select(finite) : x.reshape(-1);
  if (values.numel() > 0) {
    info.min = values.min().item<double>();
    info.max = values.max().item<double>();
    info.sum = values.sum().item<double>();
    info.mean = info.sum / static_cast<double>(values.numel());
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
