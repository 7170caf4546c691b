#include "engine/graph_step.h"

#include <ATen/ATen.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#ifdef VOLSHARD_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace volshard {

namespace {

// Copies of what a replay will overwrite (the graph's outputs live in its pool).
StepValues copied(const StepValues& v) {
  StepValues out;
  for (const at::Tensor& l : v.losses) out.losses.push_back(l.clone());
  if (v.scale.defined()) out.scale = v.scale.clone();
  if (v.found_inf.defined()) out.found_inf = v.found_inf.clone();
  return out;
}

}  // namespace

struct GraphedStep::Impl {
  bool capture = false;
  int64_t warmup = 3;
  at::Tensor image, label;  // the static buffers
  StepValues outputs;       // the captured body's, overwritten by each replay
  int64_t static_steps = 0, other_shape_steps = 0;
#ifdef VOLSHARD_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  std::optional<c10::cuda::CUDAStream> side;  // warm-up and capture run here, as torch's recipe

  // `work` on the side stream, ordered after and before the current stream's work.
  template <class Work>
  void on_side(Work&& work) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(image.device().index());
    if (!side) side = c10::cuda::getStreamFromPool(false, image.device().index());
    at::cuda::CUDAEvent before;
    before.record(current);
    before.block(*side);
    {
      const c10::cuda::CUDAStreamGuard guard(*side);
      work();
    }
    at::cuda::CUDAEvent after;
    after.record(*side);
    after.block(current);
  }
#endif
};

GraphedStep::GraphedStep(bool capture, int64_t warmup) : impl_(std::make_unique<Impl>()) {
  if (warmup < 1)
    throw std::invalid_argument("GraphedStep: warmup=" + std::to_string(warmup) + " must be >= 1");
  impl_->capture = capture;
  impl_->warmup = warmup;
}

GraphedStep::~GraphedStep() = default;

bool GraphedStep::replaying() const {
#ifdef VOLSHARD_WITH_CUDA
  return impl_->graph != nullptr;
#else
  return false;
#endif
}

int64_t GraphedStep::static_steps() const { return impl_->static_steps; }
int64_t GraphedStep::other_shape_steps() const { return impl_->other_shape_steps; }

StepValues GraphedStep::run(const at::Tensor& image, const at::Tensor& label, const Body& body) {
  Impl& m = *impl_;
  if (!m.image.defined()) {
    m.image = at::empty_like(image);
    m.label = at::empty_like(label);
  }
  if (image.sizes() != m.image.sizes() || label.sizes() != m.label.sizes() ||
      image.scalar_type() != m.image.scalar_type() ||
      label.scalar_type() != m.label.scalar_type()) {
    ++m.other_shape_steps;
    return body(image, label);
  }
  m.image.copy_(image);
  m.label.copy_(label);
  ++m.static_steps;
#ifdef VOLSHARD_WITH_CUDA
  if (m.graph) {
    m.graph->replay();
    return copied(m.outputs);
  }
  if (m.capture && m.image.is_cuda()) {
    if (m.static_steps <= m.warmup) {
      StepValues v;
      m.on_side([&] { v = body(m.image, m.label); });
      return v;
    }
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    m.on_side([&] {
      graph->capture_begin();
      try {
        m.outputs = body(m.image, m.label);
      } catch (...) {
        try {
          graph->capture_end();
        } catch (...) {  // the body's error is the one to report
        }
        throw;
      }
      graph->capture_end();
    });
    m.graph = std::move(graph);
    m.graph->replay();  // the capture recorded the step; this runs it
    return copied(m.outputs);
  }
#endif
  return body(m.image, m.label);
}

}  // namespace volshard
