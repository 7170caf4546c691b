#pragma once
// `volshard predict`: one volume through a trained network.

#include "volshard/trainer/options.h"

namespace volshard {

/// Reads the image, prepares it as training's validation did (options.prefix:
/// orientation, spacing, intensity, foreground crop), runs the network (as
/// options.inference_text() says), maps the
/// result back onto the image's own grid (crop padded, spacing and orientation
/// inverted, as MONAI's Invertd) and writes a float32 (logits, prob) or uint8
/// (label: argmax with softmax, logits > 0 per channel with sigmoid) NIfTI
/// with the input's shape and affine. Throws std::runtime_error naming the file.
void predict(const PredictOptions& options);

}  // namespace volshard
