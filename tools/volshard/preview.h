#pragma once
// volshard preview: what the network is fed, as a picture.

#include <cstdint>
#include <string>

namespace volshard {

struct PreviewOptions {
  std::string data_dir;
  std::string image_glob = "img*";
  std::string label_glob = "seg*";
  std::string out = "crops.png";
  int64_t count = 8;  ///< crops shown (volumes are taken in order, 4 crops each)
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t crop = 96;  ///< cubic crop edge
};

/// Loads volumes from data_dir, runs ScaleIntensity and the tutorial
/// augmentation (RandCropByPosNegLabel 4 crops, RandRotate90 p=0.5 axes 0,2)
/// with the per-sample seeds, and writes a PNG grid: per crop an axial and a
/// coronal slice through its centre, the label outlined in red. Returns the
/// number of crops drawn. Throws std::runtime_error naming bad files.
int64_t write_preview(const PreviewOptions& options);

}  // namespace volshard
