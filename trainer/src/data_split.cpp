#include "volshard/trainer/data_split.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "resume.h"
#include "volshard/core/error.h"
#include "volshard/datasets/nifti_header.h"

namespace volshard {

namespace {

std::array<int64_t, 3> spatial_shape(const NiftiHeader& h) {
  std::array<int64_t, 3> s{1, 1, 1};
  for (size_t a = 0; a < 3 && a < h.shape.size(); ++a) s[a] = h.shape[a];
  return s;
}

// Image and label headers agree; a training image holds the crop.
void check_pair(const TrainOptions& o, const ImageLabelPair& p, bool training) {
  NiftiHeader hi, hl;
  try {
    hi = read_nifti_header(p.image);
    hl = read_nifti_header(p.label);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("train: unreadable data: ") + e.what());
  }
  const auto si = spatial_shape(hi), sl = spatial_shape(hl);
  if (si != sl)
    throw std::invalid_argument("train: image " + p.image + " is " + shape_text(si) +
                                " but label " + p.label + " is " + shape_text(sl));
  if (training && !o.feed.allow_smaller) {
    for (int64_t side : si)
      if (side < o.feed.crop)
        throw std::invalid_argument("train: --crop=" + std::to_string(o.feed.crop) +
                                    " is larger than " + p.image + " (" + shape_text(si) +
                                    "); use a smaller crop or --allow-smaller");
  }
}

}  // namespace

DataSplit list_data(const TrainOptions& o) {
  DataSplit d;
  if (!o.datalist.empty()) {
    d.train = pairs_from_datalist(o.datalist, "training");
    std::ifstream in(o.datalist);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("validation"))
      d.val = pairs_from_datalist(o.datalist, "validation");
    return d;
  }
  auto all = pairs_from_folder(o.data_dir, o.image_glob, o.label_glob);
  const auto n = static_cast<int64_t>(all.size());
  int64_t n_val = 0;
  if (o.val_fraction > 0)
    n_val = std::max<int64_t>(1, std::llround(static_cast<double>(n) * o.val_fraction));
  if (n - n_val < 1)
    throw std::invalid_argument(
        "train: " + o.data_dir + " has " + std::to_string(n) +
        " pairs: too few to hold out --val-fraction=" + std::to_string(o.val_fraction));
  d.val.assign(all.end() - n_val, all.end());
  all.resize(static_cast<size_t>(n - n_val));
  d.train = std::move(all);
  return d;
}

int64_t training_set_size(const TrainOptions& o) {
  return static_cast<int64_t>(list_data(o).train.size());
}

void check_training_config(const TrainOptions& o, int64_t world_size) {
  o.validate();
  if (world_size < 1)
    throw std::invalid_argument("train: world size " + std::to_string(world_size) +
                                " must be >= 1");
  DataSplit d;
  try {
    d = list_data(o);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
  if (d.train.empty()) throw std::invalid_argument("train: no training pairs");
  if (o.val_every > 0 && !d.val.empty() && static_cast<int64_t>(d.val.size()) < world_size)
    throw std::invalid_argument("train: " + std::to_string(d.val.size()) +
                                " validation volumes cannot be split "
                                "unevenly over world size " +
                                std::to_string(world_size) +
                                " (every rank needs one); use fewer ranks or more validation data");
  for (const auto& p : d.train) check_pair(o, p, true);
  for (const auto& p : d.val) check_pair(o, p, false);
  if (!o.resume.empty()) {
    const std::string path = resume_checkpoint_path(o);
    if (!std::filesystem::exists(path))
      throw std::invalid_argument("train: --resume: " + path + " does not exist");
  }
  if (!o.init_weights.empty() && !std::filesystem::exists(o.init_weights))
    throw std::invalid_argument("train: --init-weights: " + o.init_weights + " does not exist");
}

}  // namespace volshard
