#include "volshard/trainer/predict.h"

#include <torch/torch.h>

#include <new>
#include <stdexcept>
#include <string>

#include "engine/run_folder.h"
#include "io/checkpoint.h"
#include "volshard/core/limits.h"
#include "volshard/core/log.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/out_of_memory.h"
#include "volshard/datasets/volume.h"
#include "volshard/trainer/model.h"
#include "volshard/trainer/serialize.h"
#include "volshard/transforms/inference.h"
#include "volshard/transforms/transforms.h"

namespace volshard {

at::Tensor infer_volume(const at::Tensor& image, const SlidingWindowOptions& sw,
                        int64_t size_multiple, const Predictor& forward, const std::string& file) {
  const bool sliding = sw.roi[0] > 0;
  // What needs the memory, and what needs less.
  const auto doing = [&] {
    return file + ": " +
           (sliding ? "the network on windows of " + edges3_text(sw.roi) + ", " +
                          std::to_string(sw.sw_batch_size) +
                          " at a time (a smaller --roi or --sw-batch-size needs less)"
                    : std::string("the network on the whole volume at once (--roi E slides a "
                                  "window of E^3 instead)"));
  };
  return naming_allocation_failures(doing, [&] {
    return sliding ? sliding_window_inference(image, sw, forward)
                   : whole_volume_inference(image, size_multiple, forward);
  });
}

void predict(const PredictOptions& o) {
  o.validate();
  if (const std::string mismatch = best_model_mismatch(o.model_path); !mismatch.empty())
    warn("predict: " + mismatch);
  Model net(o.model);
  net.load_state_dict(load_model_weights(o.model_path));
  net.to(resolve_device(o.device, 0));
  net.train(false);
  const Volume volume = read_volume_as_float(o.image_path);
  if (volume.data.size(0) != o.model.in_channels)
    throw std::runtime_error(o.image_path + ": has " + std::to_string(volume.data.size(0)) +
                             " channel(s), the model takes " + std::to_string(o.model.in_channels));
  // The image as validation prepared it (orientation, spacing, intensity,
  // foreground crop), and the prediction mapped back onto the file's grid
  // (MONAI's Invertd: logits resampled trilinearly, then argmax or threshold).
  const PairOptions prepare = whole_volume_prefix(o.prefix);
  PrefixTrace trace;
  const at::Tensor image = naming_allocation_failures(
      [&] { return o.image_path; },
      [&] { return prepare_image(volume, prepare, &trace).data.unsqueeze(0); });
  torch::NoGradGuard no_grad;
  const Predictor forward =
      o.inference.mirrored([&](const at::Tensor& x) { return net.forward_from_cpu(x); });
  const SlidingWindowOptions sw = o.inference.window(o.window());
  at::Tensor logits = infer_volume(image, sw, o.model.size_multiple(), forward, o.image_path);
  logits = logits.squeeze(0);  // C x X x Y x Z
  const bool softmax = o.activation == Activation::kSoftmax;
  at::Tensor out;
  if (o.output == PredictOutput::kProb) {  // zero probability where the crop cut
    out = invert_prefix(softmax ? at::softmax(logits, 0) : at::sigmoid(logits), trace,
                        Interpolation::kBilinear);
  } else {  // MONAI inverts the logits, then takes argmax or thresholds them
    out = invert_prefix(logits, trace, Interpolation::kBilinear);
    if (o.output == PredictOutput::kLabel)
      out = softmax ? out.argmax(0, true).to(at::kByte) : (out > 0).to(at::kByte);
    if (o.inference.largest_component) {  // on the labels, each class (channel) on its own
      if (softmax) {
        out = keep_largest_components(out[0]).unsqueeze(0);
      } else {
        for (int64_t c = 0; c < out.size(0); ++c) out[c].copy_(largest_component(out[c]));
      }
    }
  }
  write_volume(o.out_path, out.contiguous(), volume.affine);
}

}  // namespace volshard
