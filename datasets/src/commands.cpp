#include "volshard/datasets/commands.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cmath>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "volshard/datasets/volume.h"

namespace volshard {

void write_synthetic_dataset(const SynthOptions& o) {
  validate(o.volume);
  if (o.count < 0)
    throw std::invalid_argument("synth: count=" + std::to_string(o.count) + " must be >= 0");
  if (o.threads < 1)
    throw std::invalid_argument("synth: threads=" + std::to_string(o.threads) + " must be >= 1");
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) throw std::runtime_error(o.out_dir + ": cannot create the folder: " + ec.message());

  Affine identity{};
  for (size_t r = 0; r < 4; ++r) identity[r][r] = 1.0;
  std::atomic<int64_t> next{0}, done{0};
  std::mutex mutex;
  std::exception_ptr error;
  const auto work = [&] {
    for (int64_t i = next++; i < o.count; i = next++) {
      try {
        NumpyRandomState rs(synthetic_volume_seed(o.seed, i));
        SyntheticVolume v = make_test_image_3d(o.volume, rs);
        const std::vector<int64_t> shape{v.shape[0], v.shape[1], v.shape[2]};
        const auto folder = std::filesystem::path(o.out_dir);
        write_volume((folder / ("img" + std::to_string(i) + ".nii.gz")).string(),
                     at::from_blob(v.image.data(), shape, at::kFloat), identity);
        write_volume((folder / ("seg" + std::to_string(i) + ".nii.gz")).string(),
                     at::from_blob(v.label.data(), shape, at::kInt), identity);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        next = o.count;  // stop the others
        return;
      }
      const int64_t d = ++done;
      if (o.progress) {
        const std::lock_guard<std::mutex> lock(mutex);
        o.progress(d, o.count);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < o.threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

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
