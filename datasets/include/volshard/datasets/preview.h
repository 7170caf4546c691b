#pragma once
// volshard preview: what the network is fed, as a picture.

#include <cstdint>
#include <string>

#include "volshard/datasets/feed.h"

namespace volshard {

struct PreviewOptions {
  std::string data_dir;
  std::string image_glob = "img*";
  std::string label_glob = "seg*";
  std::string out = "crops.png";
  int64_t count = 8;  ///< crops shown (volumes are taken in order, num_samples crops each)
  uint64_t seed = 0;
  int64_t epoch = 0;
  FeedOptions feed;  ///< the same crop, crops per volume and rotation as training
};

/// Loads volumes from data_dir as training does (feed_prefix), runs
/// feed_augmentation(feed) with the per-sample seeds of `epoch`, and writes a PNG grid: per crop an
/// axial and a coronal slice through its centre, the label outlined in red. Returns the number of
/// crops drawn. Throws std::runtime_error naming bad files.
int64_t write_preview(const PreviewOptions& options);

}  // namespace volshard
