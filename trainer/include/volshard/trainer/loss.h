#pragma once
// MONAI's DiceLoss and DiceCELoss (monai.losses) on ATen tensors, and the
// training loss the trainer's options choose between them.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace volshard {

enum class Reduction { kMean, kSum, kNone };
Reduction parse_reduction(const std::string& text);  ///< "mean" | "sum" | "none"

struct DiceLossOptions {
  bool include_background = true;
  bool to_onehot_y = false;  ///< target holds class indices in channel 0
  bool sigmoid = false;
  bool softmax = false;
  bool squared_pred = false;
  bool jaccard = false;
  double smooth_nr = 1e-5;
  double smooth_dr = 1e-5;
  bool batch = false;  ///< sum over the batch before dividing
  Reduction reduction = Reduction::kMean;
  void validate()
      const;  ///< throws std::invalid_argument (sigmoid and softmax together, negative smoothing)
};

/// For logits x and target g of shape B x C x spatial...: per (b, c),
/// 1 - (2 I + smooth_nr) / (P + G + smooth_dr) with I = sum p g, P = sum p
/// (or p^2), G = sum g (or g^2) over the spatial voxels; jaccard uses
/// 2 (P + G - I) as the denominator. kMean: a scalar; kNone: B x C x 1...
/// (C x 1... with batch). With C == 1, softmax, to_onehot_y and
/// include_background = false are ignored with a warning, as MONAI. Throws
/// std::invalid_argument naming both shapes when they differ.
at::Tensor dice_loss(const at::Tensor& input, const at::Tensor& target,
                     const DiceLossOptions& options = {});

/// MONAI 1.4's DiceCELoss: lambda_dice * DiceLoss(dice) + lambda_ce * CE,
/// where CE is torch's CrossEntropyLoss(mean) on the logits when they have
/// more than one channel (class indices when the target has one channel,
/// probabilities when it has C, as MONAI: with sigmoid and C > 1 this is
/// still softmax cross-entropy) and BCEWithLogitsLoss(mean) on one channel.
/// dice.reduction must be kMean or kSum (the CE term is reduced the same way).
struct DiceCELossOptions {
  DiceLossOptions dice;
  double lambda_dice = 1.0;
  double lambda_ce = 1.0;
  void validate() const;  ///< throws std::invalid_argument naming the field
};
at::Tensor dice_ce_loss(const at::Tensor& input, const at::Tensor& target,
                        const DiceCELossOptions& options = {});

enum class LossKind { kDice, kDiceCE };

/// The trainer's loss, as options name it: the activation (sigmoid, or
/// softmax on one-hot class indices) comes from the network's options.
struct LossOptions {
  LossKind kind = LossKind::kDice;
  double lambda_dice = 1.0;  ///< kDiceCE
  double lambda_ce = 1.0;    ///< kDiceCE
  bool include_background = true;
  bool squared_pred = false;
  double smooth_nr = 1e-5;
  double smooth_dr = 1e-5;
};

/// The training loss of logits against a batch's labels (class indices in
/// one channel with softmax; one channel per output with sigmoid).
at::Tensor segmentation_loss(const at::Tensor& logits, const at::Tensor& target,
                             const LossOptions& options, bool softmax);

/// The loss of Model::training_outputs: segmentation_loss of the one output,
/// or, with deep supervision, MONAI 1.4's DeepSupervisionLoss(weight_mode
/// "exp") around it: the sum over levels l of max(0.5^l, 0.0625) times the
/// loss of outputs[l] against the target down-sampled to its size
/// (F.interpolate's nearest-exact; level 0 is at the target's size).
at::Tensor training_loss(const std::vector<at::Tensor>& outputs, const at::Tensor& target,
                         const LossOptions& options, bool softmax);

/// MONAI's DiceMetric(include_background=True, reduction="mean",
/// ignore_empty=True) for one volume (1 x C x spatial or C x spatial):
/// prediction = sigmoid(logits) > 0.5 (argmax one-hot with softmax), Dice per
/// channel 2|P & G| / (|P| + |G|), averaged over the channels whose label is
/// not empty; NaN when every channel's label is empty (callers skip NaN, as
/// MONAI's reduction does).
double dice_score(const at::Tensor& logits, const at::Tensor& label, bool softmax = false);

/// MONAI's DiceMetric(ignore_empty=True) per class for one volume (1 x C x
/// spatial or C x spatial logits). softmax false: channel c of logits > 0
/// (sigmoid > 0.5) against label channel c > 0.5, for every channel.
/// softmax true: argmax one-hot against the one-hot of the label's class
/// indices (one channel), classes 1..C-1 (include_background=False, as MONAI's
/// spleen tutorial). NaN for a class whose label is empty. largest_component:
/// each predicted class keeps only its largest connected component first
/// (MONAI's KeepLargestConnectedComponent on the one-hot prediction).
std::vector<double> class_dice(const at::Tensor& logits, const at::Tensor& label, bool softmax,
                               bool largest_component = false);

}  // namespace volshard
