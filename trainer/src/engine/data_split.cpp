#include "volshard/trainer/data_split.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "engine/progress.h"
#include "engine/resume.h"
#include "io/checkpoint.h"
#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/transforms/inference.h"
#include "volshard/transforms/transforms.h"
#include "volshard/volume_io/nifti_header.h"

namespace volshard {

namespace {

std::array<int64_t, 3> spatial_shape(const NiftiHeader& h) {
  std::array<int64_t, 3> s{1, 1, 1};
  for (size_t a = 0; a < 3 && a < h.shape.size(); ++a) s[a] = h.shape[a];
  return s;
}

int64_t channels_of(const NiftiHeader& h) {
  int64_t c = 1;
  for (size_t a = 3; a < h.shape.size(); ++a) c *= h.shape[a];
  return c;
}

NiftiHeader header_of(const std::string& path) {
  try {
    return read_nifti_header(path);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("train: unreadable data: ") + e.what());
  }
}

// Every image has the first one's channel count, or is refused naming both.
class SameChannels {
 public:
  void add(const std::string& image, const NiftiHeader& h) {
    const int64_t c = channels_of(h);
    if (channels_ < 0) {
      channels_ = c;
      first_ = image;
    } else if (c != channels_) {
      throw std::invalid_argument("train: " + image + " has " + std::to_string(c) +
                                  " channel(s) but " + first_ + " has " +
                                  std::to_string(channels_) + ": every image needs the same");
    }
  }
  int64_t channels() const { return channels_ < 0 ? 1 : channels_; }
  const std::string& first() const { return first_; }

 private:
  int64_t channels_ = -1;
  std::string first_;
};

// Image and label headers agree; spacings are usable; the image's channels go
// to `same`. Returns the image's spatial shape as the prefix leaves it where
// the header tells (Spacing, SpatialPad; not CropForeground).
std::array<int64_t, 3> check_pair(const TrainOptions& o, const ImageLabelPair& p,
                                  SameChannels& same) {
  const NiftiHeader hi = header_of(p.image), hl = header_of(p.label);
  same.add(p.image, hi);
  auto si = spatial_shape(hi);
  const auto sl = spatial_shape(hl);
  if (si != sl)
    throw std::invalid_argument("train: image " + p.image + " is " + shape_text(si) +
                                " but label " + p.label + " is " + shape_text(sl));
  if (channels_of(hl) != 1)
    throw std::invalid_argument("train: label " + p.label + " has " +
                                std::to_string(channels_of(hl)) +
                                " channels: a label is one map of class indices");
  const PrefixOptions& prefix = o.feed.prefix;
  if (!prefix.pixdim.empty()) {
    for (int a = 1; a <= 3; ++a) {
      if (!(hi.raw_pixdim[a] > 0) && hi.sform_code == 0)  // the affine is built from it
        throw FieldError("train: " + p.image + ": pixdim[" + std::to_string(a) +
                         "]=" + number_text(hi.raw_pixdim[a], 6) +
                         " (voxel spacing) must be > 0 to resample it (" + field_ref("pixdim") +
                         ")");
    }
    const Grid g =
        spacing_grid(si, hi.affine, {prefix.pixdim[0], prefix.pixdim[1], prefix.pixdim[2]});
    si = g.shape;  // orientation only permutes it; the crop is cubic
  }
  const std::array<int64_t, 3> pad = prefix.pad_size();
  if (pad != std::array<int64_t, 3>{}) {  // after orientation: its axes, or the largest
    const int64_t most = std::max({pad[0], pad[1], pad[2]});
    for (size_t a = 0; a < 3; ++a)
      si[a] = std::max(si[a], prefix.orientation.empty() ? pad[a] : most);
  }
  return si;
}

// Every training image holds the crop, as the prefix resamples and pads it
// (CropForeground's box needs the voxels: RankPipeline checks those once
// the cache holds them, before the loader starts).
void check_crop_fits(const TrainOptions& o, const std::vector<ImageLabelPair>& train,
                     const std::vector<std::array<int64_t, 3>>& shapes) {
  if (o.feed.prefix.crop_foreground) return;
  std::vector<VolumeShape> volumes;
  for (size_t i = 0; i < shapes.size(); ++i) volumes.push_back({train[i].image, shapes[i]});
  const PrefixOptions& prefix = o.feed.prefix;
  const bool padded = prefix.pad_size() != std::array<int64_t, 3>{};
  const std::string pixdim = field_ref("pixdim"), pad = field_ref("spatial_pad");
  volshard::check_crop_fits(o.feed, volumes,
                            prefix.pixdim.empty() && !padded ? "as stored"
                            : prefix.pixdim.empty()          ? "after " + pad
                            : padded                         ? "after " + pixdim + " and " + pad
                                                             : "after " + pixdim);
}

// A fresh run would replace checkpoint.pt and model.pt: only when asked to. A
// start that failed before its first checkpoint (config.json, metrics.jsonl
// alone) holds nothing to resume, and a retry may reuse the folder.
void check_out_folder(const TrainOptions& o) {
  if (!o.resume.empty() || o.overwrite || o.out_dir.empty()) return;
  const std::filesystem::path dir(o.out_dir);
  for (const char* name : {"checkpoint.pt", "model.pt"}) {
    const std::filesystem::path held = dir / name;
    if (std::filesystem::exists(held))
      throw FieldError("train: " + field_ref("out") + "=" + o.out_dir + " already holds a run (" +
                       held.string() + "): continue it with " + field_ref("resume") + "=" +
                       o.out_dir + " or start afresh with " + field_ref("overwrite"));
  }
  // Files a run writes, in a folder that is not a run's (no config.json):
  // someone else's, which a fresh run would replace. Other files are kept.
  if (std::filesystem::exists(dir / "config.json")) return;
  std::string found;
  for (const char* name : {"metrics.jsonl", "train.log", "fingerprints.jsonl", "curves.png",
                           "best_model.pt", "best_model.json"})
    if (std::filesystem::exists(dir / name))
      found += (found.empty() ? "" : ", ") + std::string(name);
  if (!found.empty())
    throw FieldError("train: " + field_ref("out") + "=" + o.out_dir + " holds " + found +
                     " but no config.json: not a volshard run's files, and a fresh run would "
                     "replace them. Give another " +
                     field_ref("out") + " (or " + field_ref("overwrite") + " to replace them)");
}

// What --resume names: a run (or checkpoint) that exists, was trained on
// these files and has epochs left to train, found before any worker starts.
void check_resume_point(const TrainOptions& o, const DataSplit& d) {
  const std::string resume = "train: " + field_ref("resume") + "=" + o.resume;
  if (!std::filesystem::exists(o.resume))
    throw FieldError(resume + ": no such run (no folder or checkpoint file of that name)");
  const std::string path = resume_checkpoint_path(o);
  if (!std::filesystem::exists(path))
    throw FieldError(resume + ": " + path +
                     " does not exist (not a run's folder, or a run stopped before its first "
                     "checkpoint: start it afresh)");
  Checkpoint c;
  try {
    c = load_checkpoint(path);
  } catch (const std::runtime_error& e) {
    throw FieldError(resume + ": " + e.what());
  }
  const nlohmann::json meta = nlohmann::json::parse(c.meta_json, nullptr, false);
  if (!meta.is_object() || !meta.contains("sampler") || !meta["sampler"].is_object()) return;
  if (!o.resume_anyway && meta.contains("data_files") && meta["data_files"].is_array()) {
    // The paths' other checks (the list, the count) are resume's own; here, their contents.
    const nlohmann::json now = nlohmann::json::parse(data_files_stamp(d));
    const nlohmann::json& then = meta["data_files"];
    for (size_t i = 0; i < std::min(now.size(), then.size()); ++i) {
      if (now[i] == then[i] || !then[i].is_array() || then[i].size() != 3) continue;
      if (now[i][0] != then[i][0]) break;  // another list: resume names it by its options
      throw FieldError(resume + ": " + now[i][0].get<std::string>() +
                       " changed since the checkpoint (" + then[i][1].dump() + " bytes then, " +
                       now[i][1].dump() + " now; modified " +
                       (now[i][2] == then[i][2] ? "at the same time" : "since") +
                       "): the run trained on other data. Resume with the files it trained on "
                       "(or give " +
                       field_ref("resume_anyway") + " to continue regardless)");
    }
  }
  const int64_t epoch = meta["sampler"].value("epoch", int64_t{0});  // 0-based: the next to train
  const int64_t consumed = meta["sampler"].value("consumed", int64_t{0});
  if (epoch >= o.epochs && consumed == 0)
    throw FieldError(resume + ": the run is complete: it trained " + std::to_string(epoch) +
                     " epoch(s) (" + std::to_string(meta.value("global_step", 0)) + " steps) and " +
                     field_ref("epochs") + "=" + std::to_string(o.epochs) +
                     ". To train it longer: " + field_ref("resume") + "=" + o.resume + " " +
                     field_ref("epochs") + "=" + std::to_string(epoch + 1) + " (or more)");
}

bool datalist_has_validation(const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(read_text_file(path), nullptr, false);
  return j.is_object() && j.contains("validation");
}

}  // namespace

DataSplit list_data(const TrainOptions& o) {
  // Nothing is held out for a validation that never runs.
  const double fraction = o.val_every > 0 ? o.val_fraction : 0.0;
  PairSplit split;
  try {
    split = o.datalist.empty()
                ? hold_out_tail(pairs_from_folder(o.data_dir, o.image_glob, o.label_glob), fraction,
                                o.data_dir)
                : split_datalist(o.datalist, fraction);
  } catch (const std::invalid_argument& e) {
    throw FieldError("train: " + quoted(e));
  }
  if (o.val_every == 0) split.val.clear();  // a datalist's "validation" list, unused
  return split;
}

std::string validation_text(const TrainOptions& o, const DataSplit& d, int64_t world_size) {
  const auto n_train = static_cast<int64_t>(d.train.size());
  std::string what = std::to_string(n_train) + " training volume(s)";
  // DistributedSampler's pad: each epoch repeats the first volumes of its order.
  const int64_t padded = (world_size - n_train % world_size) % world_size;
  if (padded > 0)
    what += " over " + std::to_string(world_size) + " ranks, " +
            std::to_string((n_train + padded) / world_size) +
            " a rank: DistributedSampler's padding feeds " + std::to_string(padded) +
            " of them twice an epoch" +
            (n_train < world_size ? " (more ranks than training volumes)" : "");
  what += "; validation: ";
  if (o.val_every == 0) return what + "none (--val-every 0)";
  const auto n = static_cast<int64_t>(d.val.size());
  const bool listed = !o.datalist.empty() && datalist_has_validation(o.datalist);
  if (d.val.empty())
    return what + (listed ? "none (the \"validation\" list of " + o.datalist + " is empty)"
                          : std::string("none (--val-fraction 0)"));
  const std::string from = o.datalist.empty() ? o.data_dir : o.datalist;
  std::string source = listed
                           ? "the \"validation\" list of " + o.datalist
                           : "the last " + std::to_string(n) + " pair(s) of " + from +
                                 " (--val-fraction " + number_text(o.val_fraction, 3) + "), " +
                                 d.val.front().image + (n > 1 ? " .. " + d.val.back().image : "");
  std::string out = what + std::to_string(n) + " volume(s), " + source + ", every " +
                    std::to_string(o.val_every) + " epoch(s)";
  if (n < world_size)
    out += " on " + std::to_string(n) + " of " + std::to_string(world_size) +
           " ranks (one volume each; the others wait)";
  else if (world_size > 1)
    out += o.val_balance == ValBalance::kCost
               ? ", shared over the ranks by sliding-window cost"
               : ", shared over the ranks as MONAI's split (r, r + W, ...)";
  return out;
}

int64_t image_channels(const DataSplit& d) {
  SameChannels same;
  for (const auto* list : {&d.train, &d.val})
    for (const auto& p : *list) same.add(p.image, header_of(p.image));
  return same.channels();
}

std::vector<int64_t> validation_costs(const TrainOptions& o, const std::array<int64_t, 3>& roi,
                                      const std::vector<ImageLabelPair>& val) {
  const PrefixOptions& prefix = o.feed.prefix;
  std::vector<int64_t> costs;
  for (const ImageLabelPair& p : val) {
    const NiftiHeader h = header_of(p.image);
    std::array<int64_t, 3> shape = spatial_shape(h);
    if (!prefix.pixdim.empty())
      shape = spacing_grid(shape, h.affine, {prefix.pixdim[0], prefix.pixdim[1], prefix.pixdim[2]})
                  .shape;
    int64_t windows = 1;
    for (size_t a = 0; a < 3; ++a)
      windows *= static_cast<int64_t>(
          window_starts(std::max(shape[a], roi[a]), roi[a], o.inference.overlap).size());
    costs.push_back(windows * roi[0] * roi[1] * roi[2]);
  }
  return costs;
}

std::vector<std::vector<int64_t>> assign_validation(const std::vector<int64_t>& costs,
                                                    int64_t world, ValBalance balance) {
  const auto n = static_cast<int64_t>(costs.size());
  std::vector<std::vector<int64_t>> ranks(static_cast<size_t>(world));
  if (balance == ValBalance::kCount) {
    for (int64_t i = 0; i < n; ++i) ranks[static_cast<size_t>(i % world)].push_back(i);
    return ranks;
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return costs[static_cast<size_t>(a)] > costs[static_cast<size_t>(b)];
  });
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  for (const int64_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    load[static_cast<size_t>(least)] += costs[static_cast<size_t>(i)];
    ranks[static_cast<size_t>(least)].push_back(i);
  }
  for (auto& r : ranks) std::sort(r.begin(), r.end());
  return ranks;
}

std::string data_files_stamp(const DataSplit& d) {
  nlohmann::json files = nlohmann::json::array();
  const auto add = [&files](const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      files.push_back({path, -1, -1});
      return;
    }
    const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                             static_cast<int64_t>(st.st_mtim.tv_nsec);
    files.push_back({path, static_cast<int64_t>(st.st_size), mtime_ns});
  };
  for (const auto* list : {&d.train, &d.val})
    for (const ImageLabelPair& p : *list) {
      add(p.image);
      add(p.label);
    }
  return files.dump();
}

int64_t training_set_size(const TrainOptions& o) {
  return static_cast<int64_t>(list_data(o).train.size());
}

void check_training_config(const TrainOptions& o, int64_t world_size) {
  o.validate();
  if (world_size < 1)
    throw std::invalid_argument("train: world size " + std::to_string(world_size) +
                                " must be >= 1");
  o.check_world_size(world_size);
  check_out_folder(o);
  DataSplit d;
  try {
    d = list_data(o);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
  if (d.train.empty()) throw std::invalid_argument("train: no training pairs");
  SameChannels same;
  std::vector<std::array<int64_t, 3>> shapes;
  for (const auto& p : d.train) shapes.push_back(check_pair(o, p, same));
  for (const auto& p : d.val) check_pair(o, p, same);
  check_crop_fits(o, d.train, shapes);
  if (o.model.in_channels > 0 && same.channels() != o.model.in_channels)
    throw FieldError("train: " + field_ref("in_channels") + "=" +
                     std::to_string(o.model.in_channels) + " but " + same.first() + " has " +
                     std::to_string(same.channels()) + " channel(s) (" + field_ref("in_channels") +
                     "=0 takes them from the data)");
  if (!o.resume.empty()) check_resume_point(o, d);
  if (!o.trace_samples.empty()) {
    // The trace is started anew (emptied): never over a file the run reads or writes.
    std::vector<NamedInput> inputs{
        {field_ref("datalist"), o.datalist},
        {field_ref("init_weights"), o.init_weights},
        {field_ref("resume"), o.resume.empty() ? "" : resume_checkpoint_path(o)}};
    for (const char* own : {"checkpoint.pt", "model.pt", "best_model.pt", "best_model.json",
                            "config.json", "metrics.jsonl", "fingerprints.jsonl", "train.log",
                            "curves.png", "launch.json", "run.lock"})
      inputs.push_back({field_ref("out"), (std::filesystem::path(o.out_dir) / own).string()});
    const std::string data_flag = field_ref(o.datalist.empty() ? "data" : "datalist");
    for (const auto* list : {&d.train, &d.val})
      for (const ImageLabelPair& p : *list) {
        inputs.push_back({data_flag, p.image});
        inputs.push_back({data_flag, p.label});
      }
    check_not_an_input(o.trace_samples, inputs,
                       "train: " + field_ref("trace_samples") + "=" + o.trace_samples);
  }
  if (!o.init_weights.empty() && o.resume.empty() && !std::filesystem::exists(o.init_weights))
    throw FieldError("train: " + field_ref("init_weights") + "=" + o.init_weights +
                     " does not exist");
}

}  // namespace volshard
