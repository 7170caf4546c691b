#pragma once
// Which volumes train and which validate, and the checks on them that run
// before any worker starts.

#include <cstdint>
#include <vector>

#include "volshard/datasets/datalist.h"
#include "volshard/trainer/options.h"

namespace volshard {

struct DataSplit {
  std::vector<ImageLabelPair> train, val;
};

/// The datalist's "training" and "validation" sections, or the pairs of
/// options.data_dir with the last options.val_fraction of them (at least one
/// when > 0) held out. Throws std::invalid_argument when no training pair
/// would be left, std::runtime_error naming an unreadable datalist or folder.
DataSplit list_data(const TrainOptions& options);

/// Checks what can be checked before any worker starts, for `world_size`
/// ranks: values, the data (pairs exist, headers readable, image and label
/// shapes agree), the crop against the volumes (unless allow_smaller), the
/// crop and ROI against the UNet's stride product, world size against the
/// validation set. Throws std::invalid_argument with one message naming the
/// file or value.
void check_training_config(const TrainOptions& options, int64_t world_size);

/// Training volumes the options select (after the validation hold-out).
int64_t training_set_size(const TrainOptions& options);

}  // namespace volshard
