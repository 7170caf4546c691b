#include "volshard/trainer/validate.h"

#include <torch/torch.h>

#include <cmath>

#include "volshard/core/progress.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/trainer/inference.h"
#include "volshard/trainer/loss.h"

namespace volshard {

// Each rank scores its uneven shard; the per-volume scores are summed into one
// vector indexed by dataset index (every other rank adds exact zeros), and the
// mean is taken in index order, so the result equals a single process's bit
// for bit.
double validation_dice(UNet& net, const std::vector<ImageLabelPair>& val, const TrainOptions& o,
                       Communicator& comm) {
  const auto n = static_cast<int64_t>(val.size());
  if (n == 0) return NAN;
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
  at::Tensor scores = at::zeros({2, n}, at::kDouble);  // row 0: Dice, row 1: counted
  const bool was_training = net.is_training();
  net.train(false);
  {
    torch::NoGradGuard no_grad;
    SlidingWindowOptions sw;
    const int64_t roi = o.roi > 0 ? o.roi : o.feed.crop;
    sw.roi = {roi, roi, roi};
    sw.overlap = o.overlap;
    // Rank 0 reports its share; the ranks' shares differ by at most one volume.
    Progress progress("validation (rank 0's share)", static_cast<int64_t>(indices.size()),
                      "volumes", comm.rank() == 0 ? ProgressStyle::kAuto : ProgressStyle::kOff);
    int64_t done = 0;
    for (const int64_t i : indices) {
      PairOptions po;
      po.label_indices = false;
      po.image_layout = VolumeLayout::kContiguous;
      const Sample s = load_pair(val[static_cast<size_t>(i)], i, po);
      const at::Tensor logits = sliding_window_inference(
          s.image.unsqueeze(0), sw, [&](const at::Tensor& x) { return net.forward(x); });
      const double d = dice_score(logits, s.label.unsqueeze(0));
      if (!std::isnan(d)) {
        scores[0][i] = d;
        scores[1][i] = 1.0;
      }
      progress.update(++done);
    }
    progress.finish();
  }
  net.train(was_training);
  comm.allreduce_sum(scores);  // ranks with fewer volumes still take part
  double sum = 0;
  int64_t counted = 0;
  const auto* v = scores.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) {
    if (v[n + i] > 0) {
      sum += v[i];
      ++counted;
    }
  }
  return counted == 0 ? NAN : sum / static_cast<double>(counted);
}

}  // namespace volshard
