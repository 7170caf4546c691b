#include "volshard/volume_io/synthetic_decathlon.h"

// A Decathlon task folder (imagesTr, labelsTr, imagesTs, dataset.json) of the
// phantoms decathlon_phantoms.cpp makes, written case by case on a few threads.

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "leftovers.h"
#include "volshard/core/field.h"
#include "volshard/core/file_io.h"
#include "volshard/core/parallel.h"
#include "volshard/volume_io/nifti_header.h"
#include "volshard/volume_io/synthetic_dataset.h"

namespace volshard {
namespace {

// ---- writing ----

std::string case_name(const std::string& prefix, int64_t index) {
  std::string digits = std::to_string(index);
  if (digits.size() < 3) digits.insert(0, 3 - digits.size(), '0');
  return prefix + "_" + digits;
}

void write_voxels(const std::string& path, std::vector<int64_t> shape, NiftiDatatype type,
                  const Affine& affine, const std::vector<double>& spacing_mm, const void* data,
                  double scl_slope, double scl_inter) {
  NiftiWriteSpec spec;
  int64_t n = element_size(type);
  for (const int64_t d : shape) n *= d;
  spec.shape = std::move(shape);
  spec.datatype = type;
  spec.affine = affine;
  spec.spacing_mm = spacing_mm;
  spec.scl_slope = scl_slope;
  spec.scl_inter = scl_inter;
  spec.descrip = "volshard synth";
  write_nifti(path, spec, data, static_cast<size_t>(n));
}

}  // namespace

int64_t decathlon_test_count(int64_t count) { return std::max<int64_t>(1, count / 4); }

void write_decathlon_dataset(const DecathlonSynthOptions& o) {
  if (o.kind == SynthKind::kSpheres) {
    throw std::invalid_argument(
        "write_decathlon_dataset: kind=spheres is write_synthetic_dataset's; use ct or mri");
  }
  const int64_t size = o.size == 0 ? default_decathlon_size(o.kind) : o.size;
  const std::array<int64_t, 3> shape = decathlon_shape(o.kind, size);  // validates size
  if (o.count < 1 || o.count > kMaxSynthCount)
    throw FieldError(field_ref("count") + "=" + std::to_string(o.count) + " must be in [1, " +
                     std::to_string(kMaxSynthCount) + "] for " + field_ref("kind") + "=" +
                     to_string(o.kind));
  if (o.threads < 1)
    throw FieldError(field_ref("threads") + "=" + std::to_string(o.threads) + " must be >= 1");
  const bool ct = o.kind == SynthKind::kCt;
  const std::string prefix = ct ? "spleen" : "BRATS";
  const int64_t num_test = decathlon_test_count(o.count), total = o.count + num_test;

  namespace fs = std::filesystem;
  const fs::path root(o.out_dir);
  std::set<std::string> written{"dataset.json"};
  for (int64_t index = 0; index < total; ++index) {
    const std::string file = case_name(prefix, index) + ".nii.gz";
    written.insert((fs::path(index < o.count ? "imagesTr" : "imagesTs") / file).string());
    if (index < o.count) written.insert((fs::path("labelsTr") / file).string());
  }
  detail::refuse_leftovers(o.out_dir, written, field_ref("count") + "=" + std::to_string(o.count));
  for (const char* sub : {"imagesTr", "labelsTr", "imagesTs"}) {
    std::error_code ec;
    fs::create_directories(root / sub, ec);
    if (ec) {
      throw std::runtime_error((root / sub).string() +
                               ": cannot create the folder: " + ec.message());
    }
  }

  // Training cases are 0 .. count-1, test cases the next ones: a case's
  // name and bytes depend only on (seed, index, size).
  const auto write_case = [&](int64_t index) {
    const std::string file = case_name(prefix, index) + ".nii.gz";
    const bool training = index < o.count;
    const std::string image_path = (root / (training ? "imagesTr" : "imagesTs") / file).string();
    const std::string label_path = (root / "labelsTr" / file).string();
    const std::vector<int64_t> grid{shape[0], shape[1], shape[2]};
    const double no_scaling = std::numeric_limits<double>::quiet_NaN();
    if (ct) {
      const CtCase c = make_ct_case(size, o.seed, index);
      const std::vector<double> spacing(c.spacing_mm.begin(), c.spacing_mm.end());
      write_voxels(image_path, grid, NiftiDatatype::kInt16, c.affine, spacing, c.stored.data(), 1,
                   -1024);
      if (training) {
        write_voxels(label_path, grid, NiftiDatatype::kUint8, c.affine, spacing, c.label.data(),
                     no_scaling, no_scaling);
      }
    } else {
      const MriCase m = make_mri_case(size, o.seed, index);
      const std::vector<double> spacing{1, 1, 1};
      write_voxels(image_path, {shape[0], shape[1], shape[2], 4}, NiftiDatatype::kFloat32, m.affine,
                   spacing, m.image.data(), no_scaling, no_scaling);
      if (training) {
        write_voxels(label_path, grid, NiftiDatatype::kUint8, m.affine, spacing, m.label.data(),
                     no_scaling, no_scaling);
      }
    }
  };

  parallel_items(
      total, o.threads,
      [&](int64_t i) {
        write_case(i);
        return true;
      },
      o.progress);

  // Decathlon's dataset.json, keys in its order; written last.
  nlohmann::ordered_json json;
  const std::string size_text = std::to_string(shape[0]) + " x " + std::to_string(shape[1]) +
                                " x " + std::to_string(shape[2]);
  if (ct) {
    json["name"] = "Spleen";
    json["description"] = "Spleen Segmentation (synthetic, " + size_text + " voxels)";
  } else {
    json["name"] = "BRATS";
    json["description"] = "Gliomas segmentation tumour and oedema in on brain images (synthetic, " +
                          size_text + " voxels x 4 modalities)";
  }
  json["reference"] = "volshard synth --kind " + to_string(o.kind) + " --count " +
                      std::to_string(o.count) + " --size " + std::to_string(size) + " --seed " +
                      std::to_string(o.seed);
  json["licence"] = "CC0-1.0 (synthetic data)";
  json["release"] = "1.0";
  json["tensorImageSize"] = ct ? "3D" : "4D";
  nlohmann::ordered_json modality, labels;
  if (ct) {
    modality["0"] = "CT";
    labels["0"] = "background";
    labels["1"] = "spleen";
  } else {
    for (size_t c = 0; c < kMriModalities.size(); ++c)
      modality[std::to_string(c)] = kMriModalities[c];
    labels["0"] = "background";
    labels["1"] = "edema";
    labels["2"] = "non-enhancing tumor";
    labels["3"] = "enhancing tumour";
  }
  json["modality"] = modality;
  json["labels"] = labels;
  json["numTraining"] = o.count;
  json["numTest"] = num_test;
  json["training"] = nlohmann::ordered_json::array();
  json["test"] = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < total; ++i) {
    const std::string file = case_name(prefix, i) + ".nii.gz";
    if (i < o.count) {
      json["training"].push_back(
          {{"image", "./imagesTr/" + file}, {"label", "./labelsTr/" + file}});
    } else {
      json["test"].push_back("./imagesTs/" + file);
    }
  }
  write_string_atomic((root / "dataset.json").string(), json.dump(4) + "\n");
}

}  // namespace volshard
