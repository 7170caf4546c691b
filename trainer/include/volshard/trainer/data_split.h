#pragma once
// Which volumes train and which validate, and the checks on them that run
// before any worker starts.

#include <cstdint>
#include <string>
#include <vector>

#include "volshard/datasets/datalist.h"
#include "volshard/trainer/options.h"

namespace volshard {

using DataSplit = PairSplit;

/// The datalist's "training" and "validation" sections, or the pairs of
/// options.data_dir with the last options.val_fraction of them (at least one
/// when > 0) held out; no validation volumes when options.val_every is 0. Throws
/// std::invalid_argument when no training pair would be left, std::runtime_error naming an
/// unreadable datalist or folder.
DataSplit list_data(const TrainOptions& options);

/// One line for the start of a run: how many volumes train, and what is
/// validated on (which volumes, from where, how often, on how many ranks) or
/// why nothing is (--val-every 0, --val-fraction 0, a datalist without a
/// "validation" list).
std::string validation_text(const TrainOptions& options, const DataSplit& split,
                            int64_t world_size);

/// Checks what can be checked before any worker starts, for `world_size`
/// ranks: a fresh run (no --resume) into a folder holding a run (refused
/// without --overwrite), values, the data (pairs exist, headers readable, image and label
/// shapes agree, the same channel count in every image and the network's
/// --in-channels, label maps of one channel, voxel spacings > 0 when the
/// prefix resamples), the crop against the volumes as the prefix resamples them (unless
/// allow_smaller or CropForeground), the crop and ROI against the network's down-sampling. Throws
/// std::invalid_argument with one message naming the file or value.
void check_training_config(const TrainOptions& options, int64_t world_size);

/// The images' channel count (a 4D image's fourth dimension; 1 for 3D),
/// read from the headers. Throws std::invalid_argument naming the first
/// image whose count differs from the first's.
int64_t image_channels(const DataSplit& split);

/// Each validation volume's sliding-window cost, windows times voxels per
/// window (`window`: RankPlan::val_window; options' overlap), over its shape
/// as the prefix's Spacing leaves it, read from the header (CropForeground's
/// box needs the voxels and is not counted). Throws std::invalid_argument
/// naming an unreadable file.
std::vector<int64_t> validation_costs(const TrainOptions& options,
                                      const std::array<int64_t, 3>& window,
                                      const std::vector<ImageLabelPair>& val);

/// The volumes each of `world_size` ranks validates: kCost gives the costliest
/// volume first to the least loaded rank (ties: the lower index, the lower
/// rank), as NVIDIA's MLPerf loader balances validation; kCount is MONAI's
/// uneven split (r, r + W, ...). Every volume once; each rank's list ascending.
std::vector<std::vector<int64_t>> assign_validation(const std::vector<int64_t>& costs,
                                                    int64_t world_size, ValBalance balance);

/// What identifies the data's files as a checkpoint records them: JSON, a
/// list of [path, size in bytes, modification time in ns] for every training
/// and validation image and label, in order. A resume compares it (the same
/// paths with other contents are other data).
std::string data_files_stamp(const DataSplit& split);

/// Training volumes the options select (after the validation hold-out).
int64_t training_set_size(const TrainOptions& options);

}  // namespace volshard
