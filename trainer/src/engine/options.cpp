#include "volshard/trainer/options.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/core/limits.h"
#include "volshard/datasets/field_json.h"

namespace volshard {

const std::vector<std::pair<std::string, Optimizer>>& enum_names(Optimizer) {
  static const std::vector<std::pair<std::string, Optimizer>> kNames{{"adam", Optimizer::kAdam},
                                                                     {"sgd", Optimizer::kSgd}};
  return kNames;
}
const std::vector<std::pair<std::string, Amp>>& enum_names(Amp) {
  static const std::vector<std::pair<std::string, Amp>> kNames{
      {"off", Amp::kOff}, {"fp16", Amp::kFp16}, {"bf16", Amp::kBf16}};
  return kNames;
}

const std::vector<std::pair<std::string, LrSchedule>>& enum_names(LrSchedule) {
  static const std::vector<std::pair<std::string, LrSchedule>> kNames{
      {"constant", LrSchedule::kConstant},
      {"cosine", LrSchedule::kCosine},
      {"poly", LrSchedule::kPoly}};
  return kNames;
}
const std::vector<std::pair<std::string, PredictOutput>>& enum_names(PredictOutput) {
  static const std::vector<std::pair<std::string, PredictOutput>> kNames{
      {"logits", PredictOutput::kLogits},
      {"prob", PredictOutput::kProb},
      {"label", PredictOutput::kLabel}};
  return kNames;
}
const std::vector<std::pair<std::string, ValBalance>>& enum_names(ValBalance) {
  static const std::vector<std::pair<std::string, ValBalance>> kNames{
      {"cost", ValBalance::kCost}, {"count", ValBalance::kCount}};
  return kNames;
}
const std::vector<std::pair<std::string, Backend>>& enum_names(Backend) {
  static const std::vector<std::pair<std::string, Backend>> kNames{
      {"auto", Backend::kAuto}, {"gloo", Backend::kGloo}, {"nccl", Backend::kNccl}};
  return kNames;
}
const std::vector<std::pair<std::string, Activation>>& enum_names(Activation) {
  static const std::vector<std::pair<std::string, Activation>> kNames{
      {"sigmoid", Activation::kSigmoid}, {"softmax", Activation::kSoftmax}};
  return kNames;
}
const std::vector<std::pair<std::string, BlendMode>>& enum_names(BlendMode) {
  static const std::vector<std::pair<std::string, BlendMode>> kNames{
      {"constant", BlendMode::kConstant}, {"gaussian", BlendMode::kGaussian}};
  return kNames;
}
const std::vector<std::pair<std::string, LossKind>>& enum_names(LossKind) {
  static const std::vector<std::pair<std::string, LossKind>> kNames{{"dice", LossKind::kDice},
                                                                    {"dicece", LossKind::kDiceCE}};
  return kNames;
}

namespace {

// `count` windows of edge^3 voxels through the network: input, output and the
// first level's features in float32, a lower bound of what they need.
double voxels_bytes(const std::array<int64_t, 3>& edges, int64_t count, const ModelOptions& net) {
  const double channels = static_cast<double>(std::max<int64_t>(net.in_channels, 1) +
                                              net.out_channels + net.top_channels());
  return 4.0 * static_cast<double>(edges[0]) * static_cast<double>(edges[1]) *
         static_cast<double>(edges[2]) * static_cast<double>(count) * channels;
}

// A roi: 0 (one value) or one edge or three, each >= 1.
void check_roi(const std::vector<int64_t>& roi, const std::string& flag) {
  if (roi.size() == 1 && roi[0] == 0) return;
  check_edges(roi, flag, 1, kMaxCropEdge);
}

bool roi_given(const std::vector<int64_t>& roi) {
  return !(roi.empty() || (roi.size() == 1 && roi[0] == 0));
}

}  // namespace

void TrainOptions::check_world_size(int64_t world_size) const {
  if (cuda_graph && world_size > 1)
    throw FieldError("train: " + field_ref("cuda_graph") + " captures one rank's step, and " +
                     std::to_string(world_size) +
                     " ranks all-reduce their gradients between its backward and its update (not "
                     "captured here): train on one rank, or without " +
                     field_ref("cuda_graph"));
}

const std::set<std::string>& TrainOptions::keys_with(Field::Role role) {
  static const auto collect = [](Field::Role wanted) {
    std::set<std::string> keys;
    TrainOptions o;
    for_each_field(o, [&](const Field& f, const auto&) {
      if (f.role == wanted) keys.insert(f.key);
    });
    return keys;
  };
  static const std::set<std::string> kept = collect(Field::Role::kKept),
                                     local = collect(Field::Role::kLocal),
                                     other = collect(Field::Role::kOther);
  return role == Field::Role::kKept ? kept : role == Field::Role::kLocal ? local : other;
}

void InferenceOptions::validate() const {
  std::string text;
  for (const double v : sigma_scale) text += (text.empty() ? "" : ",") + value_text(v);
  bool ok = sigma_scale.size() == 1 || sigma_scale.size() == 3;
  for (const double v : sigma_scale) ok = ok && v > 0 && v <= kMaxSigmaScale;
  if (!ok)
    throw FieldError(field_ref("sigma_scale") + "=" + text +
                     " must be one value or 3, each in (0, " + value_text(kMaxSigmaScale) + "]");
  try {
    (void)volshard::mirrored([](const at::Tensor& x) { return x; }, tta_flips);
  } catch (const std::invalid_argument& e) {
    throw FieldError(field_ref("tta_flips") + "=" + edges_text(tta_flips) + ": " + quoted(e));
  }
}

SlidingWindowOptions InferenceOptions::window(const std::array<int64_t, 3>& roi) const {
  SlidingWindowOptions sw;
  sw.roi = roi;
  sw.overlap = overlap;
  sw.sw_batch_size = sw_batch_size;
  sw.blend = blend;
  for (size_t a = 0; a < 3; ++a) sw.sigma_scale[a] = sigma_scale[sigma_scale.size() == 1 ? 0 : a];
  return sw;
}

Predictor InferenceOptions::mirrored(Predictor predict) const {
  return volshard::mirrored(std::move(predict), tta_flips);
}

std::string InferenceOptions::text() const {
  std::vector<std::string> parts;
  if (blend == BlendMode::kGaussian) {
    std::string sigma;
    for (const double v : sigma_scale) sigma += (sigma.empty() ? "" : ",") + value_text(v);
    parts.push_back("gaussian blend (sigma " + sigma + " of the window)");
  }
  if (!tta_flips.empty()) {
    const size_t passes = size_t{1} << tta_flips.size();
    parts.push_back("mirrored over " + edges_text(tta_flips) + " (" + std::to_string(passes) +
                    " passes a window)");
  }
  if (largest_component) parts.push_back("largest component per class");
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

void TrainOptions::validate() const {
  // FieldError: the fields quoted from below (quoted(e)) keep their flags.
  auto bad = [](const std::string& what) { throw FieldError(what); };
  if (data_dir.empty() == datalist.empty())
    bad("train: give exactly one of " + field_ref("data") + " (a folder) and " +
        field_ref("datalist") + " (a file)");
  if (out_dir.empty()) bad("train: " + field_ref("out") + " (the run folder) is required");
  for_each_field(*this, CheckFieldBounds{"train"});
  inference.validate();
  // Refused here, with the other values, not when the first collective is
  // built (a single process never builds one and would train on the CPU).
#ifndef VOLSHARD_WITH_NCCL
  if (backend == Backend::kNccl)
    bad("train: " + field_ref("backend") +
        "=nccl: this build has no NCCL (LibTorch without CUDA); use " + field_ref("backend") +
        "=gloo");
#else
  if (backend == Backend::kNccl && visible_gpus() == 0)
    bad("train: " + field_ref("backend") +
        "=nccl: no CUDA device here (NCCL reduces between GPUs); use " + field_ref("backend") +
        "=gloo");
#endif
  try {
    feed.validate();
  } catch (const std::invalid_argument& e) {
    bad("train: " + quoted(e));
  }
  ModelOptions net = model;
  if (net.in_channels == 0) net.in_channels = 1;  // from the data, known later
  net.validate();
  if (feed.prefix.labels != LabelMap::kClasses && activation != Activation::kSigmoid)
    bad("train: " + field_ref("labels") + "=" + enum_name(feed.prefix.labels) +
        " gives overlapping region channels: use " + field_ref("activation") + "=sigmoid");
  if (feed.prefix.labels != LabelMap::kClasses && model.out_channels != 3)
    bad("train: " + field_ref("labels") + "=" + enum_name(feed.prefix.labels) +
        " gives 3 channels (TC, WT, ET): " + field_ref("out_channels") + "=" +
        std::to_string(model.out_channels) + " must be 3");
  if (activation == Activation::kSoftmax && model.out_channels < 2)
    bad("train: " + field_ref("activation") + "=softmax needs " + field_ref("out_channels") +
        " >= 2 (background and classes)");
  if (invariant && model.resolved_norm() == NormKind::kBatch)
    bad("train: " + field_ref("invariant") + ": " + field_ref("norm") +
        "=batch mixes the volumes of a rank's batch; use instance or group");
  if (invariant && model.dropout > 0)
    bad("train: " + field_ref("invariant") + ": " + field_ref("dropout") + "=" +
        value_text(model.dropout) + " draws from each rank's own generator; use " +
        field_ref("dropout") + "=0");
  try {
    (void)resolve_cache_device(cache_device, resolve_device(device, 0));
  } catch (const std::invalid_argument& e) {
    bad("train: " + quoted(e));
  }
  if (invariant && amp != Amp::kOff)
    bad("train: " + field_ref("invariant") + " sums float32 gradients exactly: " +
        field_ref("amp") + "=" + enum_name(amp) + " rounds the forward pass instead (use off)");
  if (invariant && accumulate != 1)
    bad("train: " + field_ref("invariant") + " takes " + field_ref("batch_size") +
        " as the global batch: " + field_ref("accumulate") + "=" + std::to_string(accumulate) +
        " has no meaning there (use 1)");
  if (fused_optimizer && optimizer != Optimizer::kAdam)
    bad("train: " + field_ref("fused_optimizer") +
        " is adam's fused kernel: " + field_ref("optimizer") + "=" + enum_name(optimizer) +
        " has none here (use adam, or " + field_ref("fused_optimizer") + "=false)");
  if (cuda_graph) {
    const std::string why =
        "train: " + field_ref("cuda_graph") + " captures one step of one batch: ";
    if (!fused_optimizer || optimizer != Optimizer::kAdam)
      bad(why + "it needs " + field_ref("optimizer") + "=adam with " +
          field_ref("fused_optimizer") +
          " (torch::optim::Adam counts its steps on the host, which a replayed graph does not "
          "see)");
    if (accumulate != 1)
      bad(why + field_ref("accumulate") + "=" + std::to_string(accumulate) + " (use 1)");
    if (invariant)
      bad(why + field_ref("invariant") + " takes each volume on its own (use one or the other)");
    if (model.dropout > 0)
      bad(why + field_ref("dropout") + "=" + value_text(model.dropout) +
          " draws new masks from the host each step (use 0)");
  }
  check_roi(roi, "train: " + field_ref("roi"));
  net.check_spatial_size(feed.crop_size(), "train: " + field_ref("crop"));
  if (roi_given(roi)) net.check_spatial_size(cube_or_xyz(roi), "train: " + field_ref("roi"));
  // Lower bounds of what a step and a validation window hold, before a worker starts.
  check_fits_in_memory(voxels_bytes(feed.crop_size(), batch_size * feed.num_samples, net),
                       "train: " + field_ref("batch_size") + "=" + std::to_string(batch_size) +
                           " x " + field_ref("num_samples") + "=" +
                           std::to_string(feed.num_samples) + " crops of " + field_ref("crop") +
                           "=" + edges_text(feed.crop));
  if (roi_given(roi))
    check_fits_in_memory(voxels_bytes(cube_or_xyz(roi), inference.sw_batch_size, net),
                         "train: " + field_ref("roi") + "=" + edges_text(roi) + " with " +
                             field_ref("sw_batch_size") + "=" +
                             std::to_string(inference.sw_batch_size));
}

std::array<int64_t, 3> TrainOptions::val_window() const {
  return roi_given(roi) ? cube_or_xyz(roi) : feed.crop_size();
}

std::array<int64_t, 3> PredictOptions::window() const {
  if (whole_volume) return {0, 0, 0};
  if (roi_given(roi)) return cube_or_xyz(roi);
  return roi_given(crop) ? cube_or_xyz(crop) : std::array<int64_t, 3>{0, 0, 0};
}

FeedOptions TrainOptions::resolved_feed() const {
  FeedOptions f = feed;
  switch (f.prefix.labels) {
    case LabelMap::kClasses:
      if (activation == Activation::kSoftmax) {
        f.prefix.num_classes = model.out_channels;
      } else if (model.out_channels == 1) {
        f.prefix.num_classes = 2;  // one sigmoid channel: 0/1
      }
      break;
    case LabelMap::kBrats:
      f.prefix.num_classes = 5;  // 0, 1, 2, 4 (3 unused in the challenge's labels)
      break;
    case LabelMap::kDecathlonBrats:
      f.prefix.num_classes = 4;
      break;
  }
  return f;
}

std::string TrainOptions::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for_each_field(*this, FieldToJson{&j});
  return j.dump(2);
}

std::string PredictOptions::inference_text() const {
  const std::array<int64_t, 3> edges = window();
  const std::string extra = inference.text();
  if (edges[0] <= 0) return "whole volume" + (extra.empty() ? "" : ", " + extra);
  char overlap_text[32];
  std::snprintf(overlap_text, sizeof overlap_text, "%g", inference.overlap);
  const int64_t per_pass = inference.sw_batch_size;
  return "sliding window " + edges3_text(edges) + ", overlap " + overlap_text + ", " +
         std::to_string(per_pass) + (per_pass == 1 ? " window" : " windows") + " a pass" +
         (extra.empty() ? "" : ", " + extra);
}

void PredictOptions::validate() const {
  // A row of predict's table as field_ref names it (model_path's flag is --model).
  const auto ref = [](const char* key) {
    std::string out;
    PredictOptions o;
    for_each_field(o, [&](const Field& f, const auto&) {
      if (out.empty() && std::strcmp(f.key, key) == 0) out = field_ref(f);
    });
    return out;
  };
  if (model_path.empty() || image_path.empty() || out_path.empty())
    throw FieldError("predict: " + ref("model_path") + ", " + ref("image") + " and " + ref("out") +
                     " are required");
  try {
    (void)resolve_device(device, 0);
  } catch (const std::invalid_argument& e) {
    throw FieldError("predict: " + quoted(e));
  }
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return out_path.size() > s.size() &&
           out_path.compare(out_path.size() - s.size(), s.size(), s) == 0;
  };
  const std::string out_text = "predict: " + ref("out") + "=" + printable(out_path);
  if (!ends_with(".nii") && !ends_with(".nii.gz"))
    throw FieldError(out_text +
                     " must end in .nii or .nii.gz (the prediction is written as NIfTI)");
  check_not_an_input(out_path, {{ref("image"), image_path}, {ref("model_path"), model_path}},
                     out_text);
  for_each_field(*this, CheckFieldBounds{"predict"});
  check_roi(roi, "predict: " + ref("roi"));
  check_roi(crop, "predict: " + ref("crop"));
  try {
    inference.validate();
  } catch (const std::invalid_argument& e) {
    throw FieldError("predict: " + quoted(e));
  }
  if (inference.largest_component && output != PredictOutput::kLabel)
    throw FieldError("predict: " + ref("largest_component") +
                     " keeps components of labels: it needs " + ref("output") + "=label");
  model.validate();
  prefix.validate();
  const std::array<int64_t, 3> edges = window();
  const std::string window_ref =
      roi_given(roi) ? "predict: " + ref("roi")
                     : "predict: " + ref("crop") + " (the run's, as " + ref("roi") + ")";
  if (edges[0] > 0) {
    model.check_spatial_size(edges, window_ref);
    check_fits_in_memory(voxels_bytes(edges, inference.sw_batch_size, model),
                         window_ref + "=" + edges_text(roi_given(roi) ? roi : crop) + " with " +
                             ref("sw_batch_size") + "=" + std::to_string(inference.sw_batch_size));
  }
}

}  // namespace volshard
