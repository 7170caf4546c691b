#include "volshard/trainer/validate.h"

#include <torch/torch.h>

#include <cmath>

#include "volshard/core/progress.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/trainer/loss.h"
#include "volshard/transforms/inference.h"

namespace volshard {

// Each rank scores its uneven shard; the per-volume scores are summed into one
// vector indexed by dataset index (every other rank adds exact zeros), and the
// mean is taken in index order, so the result equals a single process's bit
// for bit.
ValidationScores validation_scores(UNet& net, const std::vector<ImageLabelPair>& val,
                                   const TrainOptions& o, Communicator& comm) {
  const auto n = static_cast<int64_t>(val.size());
  ValidationScores out;
  const bool softmax = o.activation == Activation::kSoftmax;
  const int64_t classes = o.model.out_channels - (softmax ? 1 : 0);
  out.per_class.assign(static_cast<size_t>(classes), NAN);
  if (n == 0) return out;
  // MONAI's uneven split needs a volume per rank; with fewer volumes than
  // ranks, the first n ranks take one each (what the split would give them).
  std::vector<int64_t> indices;
  if (n >= comm.world_size()) {
    DistributedSamplerOptions so;
    so.dataset_size = n;
    so.num_replicas = comm.world_size();
    so.rank = comm.rank();
    so.shuffle = false;
    so.mode = PartitionMode::kUneven;
    indices = DistributedSampler(so).indices();
  } else if (comm.rank() < n) {
    indices = {comm.rank()};
  }
  // Row 2c: class c's Dice per volume; row 2c + 1: 1 where it was scored.
  at::Tensor scores = at::zeros({2 * classes, n}, at::kDouble);
  const bool was_training = net.is_training();
  net.train(false);
  {
    torch::NoGradGuard no_grad;
    SlidingWindowOptions sw;
    const int64_t roi = o.roi > 0 ? o.roi : o.feed.crop;
    sw.roi = {roi, roi, roi};
    sw.overlap = o.overlap;
    sw.sw_batch_size = o.sw_batch_size;
    const PairOptions prefix = whole_volume_prefix(o.resolved_feed().prefix);
    // Rank 0 reports its share; the ranks' shares differ by at most one volume.
    Progress progress("validation (rank 0's share)", static_cast<int64_t>(indices.size()),
                      "volumes", comm.rank() == 0 ? ProgressStyle::kAuto : ProgressStyle::kOff);
    int64_t done = 0;
    for (const int64_t i : indices) {
      const Sample s = load_pair(val[static_cast<size_t>(i)], i, prefix);
      const at::Tensor logits = sliding_window_inference(
          s.image.unsqueeze(0), sw, [&](const at::Tensor& x) { return net.forward(x); });
      const std::vector<double> d = class_dice(logits, s.label.to(at::kFloat), softmax);
      for (int64_t c = 0; c < classes; ++c) {
        if (std::isnan(d[static_cast<size_t>(c)])) continue;
        scores[2 * c][i] = d[static_cast<size_t>(c)];
        scores[2 * c + 1][i] = 1.0;
      }
      progress.update(++done);
    }
    progress.finish();
  }
  net.train(was_training);
  comm.allreduce_sum(scores);  // ranks with fewer volumes still take part
  // Sums in index order (volume, then class): the same on any world size.
  const auto* v = scores.data_ptr<double>();
  double sum = 0;
  int64_t counted = 0;
  std::vector<double> class_sum(static_cast<size_t>(classes), 0.0);
  std::vector<int64_t> class_count(static_cast<size_t>(classes), 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < classes; ++c) {
      if (v[(2 * c + 1) * n + i] == 0) continue;
      const double d = v[2 * c * n + i];
      sum += d;
      ++counted;
      class_sum[static_cast<size_t>(c)] += d;
      ++class_count[static_cast<size_t>(c)];
    }
  }
  if (counted > 0) out.mean = sum / static_cast<double>(counted);
  for (size_t c = 0; c < class_sum.size(); ++c)
    if (class_count[c] > 0) out.per_class[c] = class_sum[c] / static_cast<double>(class_count[c]);
  return out;
}

double validation_dice(UNet& net, const std::vector<ImageLabelPair>& val, const TrainOptions& o,
                       Communicator& comm) {
  return validation_scores(net, val, o, comm).mean;
}

}  // namespace volshard
