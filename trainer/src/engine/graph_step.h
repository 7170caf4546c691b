#pragma once
// The training step as a CUDA graph (--cuda-graph): the step's work, from a
// batch in static buffers to the optimizer's update, captured once and then
// replayed with one launch, as torch.cuda.graph does for a whole network
// (warm-up runs first, on the capture's side stream; the capture in a private
// memory pool). Device-generic: where there is nothing to capture (the CPU,
// or `capture` false) the same step runs uncaptured on the same static
// buffers, which is how its tests check it against the plain step here.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace volshard {

/// What a step leaves on the device for the host to read later.
struct StepValues {
  std::vector<at::Tensor> losses;  ///< one float32 0-d loss per micro-batch
  at::Tensor scale;                ///< --amp fp16: the scale the step used (float32 [1])
  at::Tensor found_inf;            ///< --amp fp16: nonzero where the step was skipped
};

class GraphedStep {
 public:
  /// One step from a batch: everything it does must stay on the device (no
  /// read to the host, no allocation that depends on values), as a capture needs.
  using Body = std::function<StepValues(const at::Tensor& image, const at::Tensor& label)>;

  /// `capture`: capture on a CUDA device after `warmup` uncaptured runs.
  GraphedStep(bool capture, int64_t warmup = 3);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  /// Copies the batch into the static buffers (made like the first batch:
  /// its shape, type, device and layout) and runs `body` on them: uncaptured
  /// during warm-up or where nothing is captured, else captured once and
  /// replayed. A batch of another shape runs `body` on itself, uncaptured (an
  /// epoch's last, shorter batch). The values returned are the step's own
  /// (copies where a replay would overwrite them).
  StepValues run(const at::Tensor& image, const at::Tensor& label, const Body& body);

  /// Whether steps are now replayed from a captured graph.
  bool replaying() const;
  /// Steps run through the static buffers (captured or not), and uncaptured
  /// for another shape.
  int64_t static_steps() const;
  int64_t other_shape_steps() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace volshard
