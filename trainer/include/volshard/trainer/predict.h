#pragma once
// `volshard predict`: one volume through a trained UNet.

#include "volshard/trainer/options.h"

namespace volshard {

/// Reads the image, scales its intensity as in training, runs the UNet and
/// writes a float32 (logits, prob) or uint8 (label) NIfTI with the input's
/// affine. Throws std::runtime_error naming the file.
void predict(const PredictOptions& options);

}  // namespace volshard
