#include "volshard/trainer/loss.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "volshard/core/error.h"
#include "volshard/core/log.h"
#include "volshard/transforms/inference.h"

namespace volshard {

Reduction parse_reduction(const std::string& text) {
  if (text == "mean") return Reduction::kMean;
  if (text == "sum") return Reduction::kSum;
  if (text == "none") return Reduction::kNone;
  throw std::invalid_argument("DiceLoss: reduction='" + text + "' must be mean, sum or none");
}

void DiceLossOptions::validate() const {
  if (sigmoid && softmax)
    throw std::invalid_argument("DiceLoss: sigmoid and softmax are mutually exclusive");
  if (!(smooth_nr >= 0) || !(smooth_dr >= 0))
    throw std::invalid_argument("DiceLoss: smooth_nr=" + std::to_string(smooth_nr) +
                                " and smooth_dr=" + std::to_string(smooth_dr) + " must be >= 0");
}

namespace {

// Class indices in channel 0 of a B x 1 x spatial target -> one channel per
// class (MONAI's one_hot), typed `type`.
at::Tensor one_hot_channels(const at::Tensor& target, int64_t channels, at::ScalarType type) {
  return at::one_hot(target.select(1, 0).to(at::kLong), channels).movedim(-1, 1).to(type);
}

}  // namespace

at::Tensor dice_loss(const at::Tensor& input, const at::Tensor& target_in,
                     const DiceLossOptions& o) {
  o.validate();
  if (input.dim() < 3)
    throw std::invalid_argument("DiceLoss: input must be B x C x spatial..., got " +
                                std::to_string(input.dim()) + " dimensions");
  const int64_t channels = input.size(1);
  at::Tensor p = input;
  if (o.sigmoid) p = at::sigmoid(p);
  if (o.softmax) {
    if (channels == 1)
      warn("DiceLoss: single channel prediction, softmax=True ignored.");
    else
      p = at::softmax(p, 1);
  }
  at::Tensor g = target_in;
  if (o.to_onehot_y) {
    if (channels == 1) {
      warn("DiceLoss: single channel prediction, to_onehot_y=True ignored.");
    } else {
      g = one_hot_channels(g, channels, input.scalar_type());
    }
  }
  if (!o.include_background) {
    if (channels == 1) {
      warn("DiceLoss: single channel prediction, include_background=False ignored.");
    } else {
      p = p.narrow(1, 1, channels - 1);
      g = g.narrow(1, 1, channels - 1);
    }
  }
  if (g.sizes() != p.sizes()) {
    std::ostringstream s;
    s << "DiceLoss: ground truth has shape " << g.sizes() << " but input has shape " << p.sizes();
    throw std::invalid_argument(s.str());
  }
  std::vector<int64_t> dims;  // the spatial dims, and the batch with batch=true
  if (o.batch) dims.push_back(0);
  for (int64_t d = 2; d < p.dim(); ++d) dims.push_back(d);
  const at::Tensor intersection = (p * g).sum(dims);
  const at::Tensor pred_o = o.squared_pred ? (p * p).sum(dims) : p.sum(dims);
  const at::Tensor ground_o = o.squared_pred ? (g * g).sum(dims) : g.sum(dims);
  at::Tensor denominator = ground_o + pred_o;
  if (o.jaccard) denominator = 2.0 * (denominator - intersection);
  const at::Tensor f = 1.0 - (2.0 * intersection + o.smooth_nr) / (denominator + o.smooth_dr);
  switch (o.reduction) {
    case Reduction::kMean:
      return f.mean();
    case Reduction::kSum:
      return f.sum();
    case Reduction::kNone: {
      std::vector<int64_t> shape(f.sizes().begin(), f.sizes().end());
      for (int64_t d = 2; d < p.dim(); ++d) shape.push_back(1);
      return f.reshape(shape);
    }
  }
  return f.mean();
}

void DiceCELossOptions::validate() const {
  dice.validate();
  if (!(lambda_dice >= 0) || !(lambda_ce >= 0))
    throw std::invalid_argument("DiceCELoss: lambda_dice=" + value_text(lambda_dice) +
                                " and lambda_ce=" + value_text(lambda_ce) + " must be >= 0");
  if (dice.reduction == Reduction::kNone)
    throw std::invalid_argument("DiceCELoss: reduction must be mean or sum");
}

at::Tensor dice_ce_loss(const at::Tensor& input, const at::Tensor& target,
                        const DiceCELossOptions& o) {
  o.validate();
  if (input.dim() != target.dim() || input.dim() < 3 ||
      (target.size(1) != 1 && target.size(1) != input.size(1))) {
    std::ostringstream s;
    s << "DiceCELoss: target of shape " << target.sizes() << " must be B x 1 x spatial or match "
      << "the input's shape " << input.sizes();
    throw std::invalid_argument(s.str());
  }
  const int64_t reduction =
      o.dice.reduction == Reduction::kSum ? at::Reduction::Sum : at::Reduction::Mean;
  const at::Tensor dice = dice_loss(input, target, o.dice);
  at::Tensor ce;
  if (input.size(1) == 1) {
    ce = at::binary_cross_entropy_with_logits(input, target.to(input.scalar_type()), {}, {},
                                              reduction);
  } else if (target.size(1) == 1 && input.is_cuda() &&
             at::globalContext().deterministicAlgorithms()) {
    // Class indices go through nll_loss2d, which CUDA refuses under deterministic
    // algorithms (an atomic reduction); the same loss with the one-hot target as class
    // probabilities is log_softmax, a product and sums, which it runs. Equal in value, summed
    // in another order: the CPU keeps the index form (and its bits).
    ce = at::cross_entropy_loss(input, one_hot_channels(target, input.size(1), input.scalar_type()),
                                {}, reduction);
  } else if (target.size(1) == 1) {  // class indices
    ce = at::cross_entropy_loss(input, target.squeeze(1).to(at::kLong), {}, reduction);
  } else {  // class probabilities
    ce = at::cross_entropy_loss(input, target.to(input.scalar_type()), {}, reduction);
  }
  return o.lambda_dice * dice + o.lambda_ce * ce;
}

at::Tensor segmentation_loss(const at::Tensor& logits, const at::Tensor& target,
                             const LossOptions& o, bool softmax) {
  DiceCELossOptions d;
  if (softmax) {
    d.dice.to_onehot_y = true;  // MONAI's spleen: DiceLoss(to_onehot_y=True, softmax=True)
    d.dice.softmax = true;
  } else {
    d.dice.sigmoid = true;
  }
  d.dice.include_background = o.include_background;
  d.dice.squared_pred = o.squared_pred;
  d.dice.smooth_nr = o.smooth_nr;
  d.dice.smooth_dr = o.smooth_dr;
  if (o.kind == LossKind::kDice) return dice_loss(logits, target, d.dice);
  d.lambda_dice = o.lambda_dice;
  d.lambda_ce = o.lambda_ce;
  return dice_ce_loss(logits, target, d);
}

at::Tensor training_loss(const std::vector<at::Tensor>& outputs, const at::Tensor& target,
                         const LossOptions& o, bool softmax) {
  if (outputs.empty()) throw std::invalid_argument("training_loss: no outputs to score");
  at::Tensor loss = segmentation_loss(outputs[0], target, o, softmax);
  for (size_t l = 1; l < outputs.size(); ++l) {
    const at::Tensor& out = outputs[l];
    at::Tensor down = target;
    if (out.sizes().slice(2) != target.sizes().slice(2))
      down = at::_upsample_nearest_exact3d(target, out.sizes().slice(2), std::nullopt, std::nullopt,
                                           std::nullopt);
    const double weight = std::max(std::pow(0.5, static_cast<double>(l)), 0.0625);
    loss = loss + weight * segmentation_loss(out, down, o, softmax);
  }
  return loss;
}

double dice_score(const at::Tensor& logits_in, const at::Tensor& label_in, bool softmax) {
  // 1 x C x spatial or C x spatial.
  const at::Tensor logits = logits_in.dim() == 5 ? logits_in.select(0, 0) : logits_in;
  const at::Tensor label = label_in.dim() == 5 ? label_in.select(0, 0) : label_in;
  if (logits.sizes() != label.sizes()) {
    std::ostringstream s;
    s << "dice_score: prediction shape " << logits.sizes() << " differs from label shape "
      << label.sizes();
    throw std::invalid_argument(s.str());
  }
  const int64_t channels = logits.size(0);
  at::Tensor pred;
  if (softmax && channels > 1) {
    pred = at::one_hot(logits.argmax(0), channels).movedim(-1, 0).to(at::kFloat);
  } else {
    pred = (logits > 0).to(at::kFloat);  // sigmoid(x) > 0.5  <=>  x > 0
  }
  const at::Tensor truth = (label > 0.5).to(at::kFloat);
  double sum = 0;
  int64_t counted = 0;
  for (int64_t c = 0; c < channels; ++c) {
    const double g = truth[c].sum().item<double>();
    if (g == 0) continue;  // MONAI ignore_empty: NaN, skipped by the mean
    const double pr = pred[c].sum().item<double>();
    const double inter = (pred[c] * truth[c]).sum().item<double>();
    sum += 2.0 * inter / (pr + g);
    ++counted;
  }
  return counted == 0 ? std::numeric_limits<double>::quiet_NaN()
                      : sum / static_cast<double>(counted);
}

std::vector<double> class_dice(const at::Tensor& logits_in, const at::Tensor& label_in,
                               bool softmax, bool largest_component) {
  const at::Tensor logits = logits_in.dim() == 5 ? logits_in.select(0, 0) : logits_in;
  const at::Tensor label = label_in.dim() == 5 ? label_in.select(0, 0) : label_in;
  const int64_t channels = logits.size(0);
  const bool spatial_agree =
      logits.dim() == label.dim() && logits.sizes().slice(1) == label.sizes().slice(1);
  if (!spatial_agree || (softmax ? label.size(0) != 1 : label.size(0) != channels)) {
    std::ostringstream s;
    s << "class_dice: prediction shape " << logits.sizes() << " and label shape " << label.sizes()
      << (softmax ? " (softmax: the label holds one channel of class indices)" : " differ");
    throw std::invalid_argument(s.str());
  }
  at::Tensor pred, truth;
  int64_t first = 0;
  if (softmax) {
    const at::Tensor classes = label.select(0, 0).round().to(at::kLong).clamp(0, channels - 1);
    pred = at::one_hot(logits.argmax(0), channels).movedim(-1, 0);
    truth = at::one_hot(classes, channels).movedim(-1, 0);
    first = 1;  // without background
  } else {
    pred = logits > 0;  // sigmoid(x) > 0.5  <=>  x > 0
    truth = label > 0.5;
  }
  std::vector<double> out;
  for (int64_t c = first; c < channels; ++c) {
    // largest_component labels on the host; the sums run where the logits are.
    const at::Tensor p = (largest_component ? volshard::largest_component(pred[c]) : pred[c])
                             .to(pred.device(), at::kDouble),
                     g = truth[c].to(at::kDouble);
    const double gs = g.sum().item<double>();
    if (gs == 0) {  // MONAI ignore_empty: NaN, skipped by the means
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    const double inter = (p * g).sum().item<double>();
    out.push_back(2.0 * inter / (p.sum().item<double>() + gs));
  }
  return out;
}

}  // namespace volshard
