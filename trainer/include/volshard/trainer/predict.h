#pragma once
// `volshard predict`: one volume through a trained network.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "volshard/trainer/options.h"
#include "volshard/transforms/inference.h"

namespace volshard {

/// Reads the image, prepares it as training's validation did (options.prefix:
/// orientation, spacing, intensity, foreground crop), runs the network (as
/// options.inference_text() says), maps the
/// result back onto the image's own grid (crop padded, spacing and orientation
/// inverted, as MONAI's Invertd) and writes a float32 (logits, prob) or uint8
/// (label: argmax with softmax, logits > 0 per channel with sigmoid) NIfTI
/// with the input's shape and affine. Throws std::runtime_error naming the file.
void predict(const PredictOptions& options);

/// The network over one prepared volume (1 x C x X x Y x Z): sliding-window
/// inference of `sw` (MONAI's), or the whole volume at once where sw.roi is
/// 0 (padded to `size_multiple`). An allocation that fails there (the
/// network's activations, past what the up-front checks count) is named with
/// `file`, the windows and what needs less (--roi, --sw-batch-size): an
/// OutOfMemoryError on the CPU, c10's text on a device.
at::Tensor infer_volume(const at::Tensor& image, const SlidingWindowOptions& sw,
                        int64_t size_multiple, const Predictor& forward, const std::string& file);

}  // namespace volshard
