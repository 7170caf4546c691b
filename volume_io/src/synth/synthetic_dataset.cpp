#include "volshard/volume_io/synthetic_dataset.h"

#include <array>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "leftovers.h"
#include "volshard/core/field.h"
#include "volshard/core/parallel.h"
#include "volshard/volume_io/nifti_header.h"
#include "volshard/volume_io/voxel_copy.h"

namespace volshard {
namespace {

// What write_volume writes for a C-order X x Y x Z volume, without ATen (so
// that `volshard synth` starts without loading LibTorch): file order, default
// gzip level for ".gz", NIfTI-1, spacing from the affine.
void write_c_order(const std::string& path, const std::vector<int64_t>& shape, NiftiDatatype type,
                   const void* data, const Affine& affine) {
  const std::array<int64_t, 4> cxyz{1, shape[0], shape[1], shape[2]};
  const auto nbytes = static_cast<size_t>(shape[0] * shape[1] * shape[2] * element_size(type));
  std::vector<uint8_t> file_order(nbytes);
  c_order_to_file_order(data, file_order.data(), type, cxyz, 0, cxyz[2]);
  NiftiWriteSpec spec;
  spec.shape = shape;
  spec.datatype = type;
  spec.affine = affine;
  write_nifti(path, spec, file_order.data(), nbytes);
}

}  // namespace

void write_synthetic_dataset(const SynthOptions& o) {
  validate(o.volume);
  if (o.count < 0 || o.count > kMaxSynthCount)
    throw std::invalid_argument("synth: count=" + std::to_string(o.count) + " must be in [0, " +
                                std::to_string(kMaxSynthCount) + "]");
  if (o.threads < 1)
    throw std::invalid_argument("synth: threads=" + std::to_string(o.threads) + " must be >= 1");
  std::set<std::string> written;
  for (int64_t i = 0; i < o.count; ++i) {
    written.insert("img" + std::to_string(i) + ".nii.gz");
    written.insert("seg" + std::to_string(i) + ".nii.gz");
  }
  detail::refuse_leftovers(o.out_dir, written, field_ref("count") + "=" + std::to_string(o.count));
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) throw std::runtime_error(o.out_dir + ": cannot create the folder: " + ec.message());

  Affine identity{};
  for (size_t r = 0; r < 4; ++r) identity[r][r] = 1.0;
  const auto folder = std::filesystem::path(o.out_dir);
  const auto write = [&](int64_t i) {
    NumpyRandomState rs(synthetic_volume_seed(o.seed, i));
    SyntheticVolume v = make_test_image_3d(o.volume, rs);
    const std::vector<int64_t> shape{v.shape[0], v.shape[1], v.shape[2]};
    write_c_order((folder / ("img" + std::to_string(i) + ".nii.gz")).string(), shape,
                  NiftiDatatype::kFloat32, v.image.data(), identity);
    write_c_order((folder / ("seg" + std::to_string(i) + ".nii.gz")).string(), shape,
                  NiftiDatatype::kInt32, v.label.data(), identity);
    return true;
  };
  parallel_items(o.count, o.threads, write, o.progress);
}

}  // namespace volshard
