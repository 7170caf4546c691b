#pragma once
// Which files make up a dataset: image/label pairs from a folder or from a
// MONAI/Decathlon-style JSON datalist. Standard library only.

#include <string>
#include <vector>

namespace volshard {

struct ImageLabelPair {
  std::string image;
  std::string label;
};

/// "img9" < "img10": digit runs compare as numbers, the rest byte by byte.
bool natural_less(const std::string& a, const std::string& b);

/// Files of `folder` (not recursive) matching the shell globs, each list in
/// natural order, paired by position. Throws std::runtime_error naming the
/// folder, the globs and the counts if they differ or nothing matches;
/// std::system_error with the errno if the folder cannot be read.
std::vector<ImageLabelPair> pairs_from_folder(const std::string& folder,
                                              const std::string& image_glob = "img*",
                                              const std::string& label_glob = "seg*");

/// The keys of a datalist entry that name its two files: the Decathlon's
/// {"image", "label"}, or another pair such as MONAI's DDP tutorial's
/// {"img", "seg"}.
struct PairKeys {
  std::string image = "image";
  std::string label = "label";
};

/// {"training":[{"image":"...","label":"..."}],"validation":[...]}: the
/// entries of `section`, paths relative to the datalist's folder unless
/// absolute, their files under `keys`. Throws std::runtime_error naming the
/// file and the entry for bad JSON, a missing section or key; a datalist that
/// cannot be read, or files of it that do not exist (every one listed), throw
/// std::system_error with the errno (ENOENT: Python's FileNotFoundError).
std::vector<ImageLabelPair> pairs_from_datalist(const std::string& datalist_path,
                                                const std::string& section = "training",
                                                const PairKeys& keys = {});

/// Which pairs train and which validate, as `volshard train` and Python's
/// `Loader(split=)` choose them.
struct PairSplit {
  std::vector<ImageLabelPair> train, val;
};

/// The last `val_fraction` of `pairs` (rounded, at least one when > 0)
/// validate and the rest train, in order. Throws std::invalid_argument naming
/// `source` and --val-fraction when no training pair would be left.
PairSplit hold_out_tail(std::vector<ImageLabelPair> pairs, double val_fraction,
                        const std::string& source);

/// A datalist's "training" and "validation" lists (a case in both is refused:
/// the metric would score volumes the model trained on), or, without a
/// "validation" list (a Decathlon dataset.json), its "training" list with the
/// tail held out as hold_out_tail does. Throws as pairs_from_datalist, and
/// std::invalid_argument for a case in both lists.
PairSplit split_datalist(const std::string& datalist_path, double val_fraction,
                         const PairKeys& keys = {});

}  // namespace volshard
