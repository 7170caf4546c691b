#pragma once
// volshard preview: what the network is fed, as a picture.

#include <cstdint>
#include <string>
#include <vector>

#include "volshard/datasets/feed.h"
#include "volshard/transforms/sample.h"

namespace volshard {

struct PreviewOptions {
  std::string data_dir;  ///< a folder of image/label pairs (image_glob, label_glob), or
  std::string datalist;  ///< a datalist or Decathlon dataset.json: its "training" entries
  std::string image_glob = "img*";
  std::string label_glob = "seg*";
  std::string out = "crops.png";
  int64_t count = 8;  ///< crops shown (volumes are taken in order, num_samples crops each)
  uint64_t seed = 0;
  int64_t epoch = 0;
  FeedOptions feed;      ///< the same crop, crops per volume and rotation as training
  int64_t channel = -1;  ///< image channel to draw; -1: every channel, side by side
};

/// PreviewOptions' own rows (the pipeline's are for_each_feed_field's): the
/// command's flags, and the keys it takes from a training config (the data and
/// the seed; the picture's own, out to channel, are flags only: a run's "out"
/// is its folder).
template <class Self, class Visit>
void for_each_preview_field(Self& o, Visit&& visit) {
  visit(Field("data", "folder of image/label pairs: the augmented crops training feeds"),
        o.data_dir);
  visit(Field("datalist",
              "instead of --data: a datalist or Decathlon dataset.json (its \"training\" entries)"),
        o.datalist);
  visit(Field("image_glob", "image file pattern"), o.image_glob);
  visit(Field("label_glob", "label file pattern"), o.label_glob);
  visit(Field("seed", "base seed of the augmentation"), o.seed);
  visit(Field("out", "PNG to write").flag_only(), o.out);
  visit(Field("count", "crops to show").at_least(1).at_most(256).flag_only(), o.count);
  visit(Field("epoch", "epoch whose augmentation to show").at_least(0).flag_only(), o.epoch);
  visit(Field("channel", "image channel to draw (-1: every channel)").at_least(-1).flag_only(),
        o.channel);
}

/// The caption lines of a crop (joined by '\n'): file name, patch,
/// channel (when one is chosen) and quarter turns; then the crop's first
/// voxel in the volume and the class its centre was drawn from
/// (RandCropByPosNegLabel's fg/bg draw; the centre itself may lie elsewhere
/// once the crop is clamped into the volume); then, where any was applied,
/// the random steps in the pipeline's order, short names (affine, zoom,
/// elastic, flip and its axes, noise, smooth, scale, shift, gamma).
std::string preview_caption(const SampleMeta& meta, int64_t channel = -1);

/// Loads volumes from data_dir or datalist (exactly one) as training does (feed_prefix), runs
/// feed_augmentation(feed) with the per-sample seeds of `epoch`, and writes a PNG grid: per crop an
/// axial and a coronal slice through its centre for every image channel (or `channel`), the label
/// outlined in red, captioned by preview_caption. Each channel's grey levels run from the 0.5th to
/// the 99.5th percentile of that channel over every crop shown (one window for all, so that the
/// intensity steps show; z-scored crops are not clipped to [0, 1]). Returns the number of crops drawn. Throws
/// std::runtime_error naming bad files, std::invalid_argument for a channel a file lacks.
int64_t write_preview(const PreviewOptions& options);

/// A prediction beside its label, for one volume.
struct PredictionPreviewOptions {
  std::string image;       ///< the image the prediction was made from
  std::string label;       ///< its manual label (class indices)
  std::string prediction;  ///< `volshard predict`'s label, on the same grid
  std::string out = "prediction.png";
  int64_t channel = 0;  ///< image channel to draw
};

/// Writes a PNG: the sagittal, coronal and axial slices through the label's
/// foreground centre (the volume's centre without foreground), each as the
/// image (0.5th to 99.5th percentile as grey) with the label's class
/// boundaries in red beside the same slice with the prediction's in green,
/// captioned with the file and each class's Dice. Returns the Dice of classes
/// 1..max (NaN for a class in neither). Throws std::runtime_error naming the
/// file for a bad file, a shape unlike the image's or a value that is not a
/// class index.
std::vector<double> write_prediction_preview(const PredictionPreviewOptions& options);

}  // namespace volshard
