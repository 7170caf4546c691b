#include "engine/validate.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "volshard/core/progress.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/trainer/data_split.h"
#include "volshard/trainer/loss.h"
#include "volshard/trainer/predict.h"
#include "volshard/transforms/inference.h"

namespace volshard {

ValidationCache::ValidationCache(CacheOptions options) : options_(std::move(options)) {
  options_.validate();
}

const std::vector<int64_t>& ValidationCache::share(
    const std::function<std::vector<int64_t>()>& assign) {
  if (!share_) {
    share_ = assign();
    const int64_t most = share_->empty() ? -1 : *std::max_element(share_->begin(), share_->end());
    position_.assign(static_cast<size_t>(most + 1), -1);
    for (size_t p = 0; p < share_->size(); ++p)
      position_[static_cast<size_t>((*share_)[p])] = static_cast<int64_t>(p);
  }
  return *share_;
}

Sample ValidationCache::get(int64_t index, const SampleSource& prepare) {
  if (!share_) throw std::logic_error("ValidationCache: get() before share()");
  const int64_t p = index >= 0 && index < static_cast<int64_t>(position_.size())
                        ? position_[static_cast<size_t>(index)]
                        : -1;
  if (p < 0)
    throw std::out_of_range("ValidationCache: volume " + std::to_string(index) +
                            " is not in this rank's share");
  // Volumes past cache_rate are prepared at each call, by this call's `prepare`
  // (the first call's may refer to what is gone by now).
  prepare_ = prepare;
  if (!cache_)
    cache_ = std::make_unique<SampleCache>(
        [this](int64_t k) { return prepare_((*share_)[static_cast<size_t>(k)]); },
        static_cast<int64_t>(share_->size()), options_);
  return cache_->get(p);
}

int64_t ValidationCache::cached_items() const { return cache_ ? cache_->cached_items() : 0; }

// Each rank scores its share (assign_validation); the per-volume scores are summed into one
// vector indexed by dataset index (every other rank adds exact zeros), and the
// mean is taken in index order, so the result equals a single process's bit
// for bit.
ValidationScores validation_scores(Model& net, const std::vector<ImageLabelPair>& val,
                                   const TrainOptions& o, const RankPlan& plan, Communicator& comm,
                                   ValidationCache* cache) {
  const auto n = static_cast<int64_t>(val.size());
  ValidationScores out;
  const bool softmax = o.activation == Activation::kSoftmax;
  const int64_t classes = o.model.out_channels - (softmax ? 1 : 0);
  out.per_class.assign(static_cast<size_t>(classes), NAN);
  if (n == 0) return out;
  // By sliding-window cost (or MONAI's split): every volume once.
  const auto assign = [&] {
    return assign_validation(o.val_balance == ValBalance::kCost
                                 ? validation_costs(o, plan.val_window, val)
                                 : std::vector<int64_t>(static_cast<size_t>(n), 1),
                             plan.world, o.val_balance)[static_cast<size_t>(plan.rank)];
  };
  const std::vector<int64_t> indices = cache ? cache->share(assign) : assign();
  // Row 2c: class c's Dice per volume; row 2c + 1: 1 where it was scored.
  at::Tensor scores = at::zeros({2 * classes, n}, at::kDouble);
  const auto started = std::chrono::steady_clock::now();
  const bool was_training = net.is_training();
  net.train(false);
  {
    torch::NoGradGuard no_grad;
    const SlidingWindowOptions sw = o.inference.window(plan.val_window);
    // The logits stay on the network's device: the windows are blended and scored there.
    const at::Device device = net.device();
    const Predictor forward = o.inference.mirrored(
        [&](const at::Tensor& x) { return net.forward(x.to(device, /*non_blocking=*/true)); });
    PairOptions prefix = whole_volume_prefix(o.resolved_feed().prefix);
    prefix.compact_label = true;  // kept uint8 where the values fit: a quarter of float32's memory
    // Rank 0 reports its share; the ranks' shares differ by at most one volume.
    Progress progress("validation (rank 0's share)", static_cast<int64_t>(indices.size()),
                      "volumes", comm.rank() == 0 ? ProgressStyle::kAuto : ProgressStyle::kOff);
    int64_t done = 0;
    for (const int64_t i : indices) {
      const SampleSource load = [&](int64_t k) {
        return load_pair(val[static_cast<size_t>(k)], k, prefix);
      };
      const Sample s = cache ? cache->get(i, load) : load(i);
      const at::Tensor logits = infer_volume(s.image.unsqueeze(0), sw, o.model.size_multiple(),
                                             forward, val[static_cast<size_t>(i)].image);
      const std::vector<double> d =
          class_dice(logits, s.label.to(logits.device()), softmax, o.inference.largest_component);
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
  // Each rank's own time, before it waits for the others in the all-reduce.
  at::Tensor seconds = at::zeros({comm.world_size()}, at::kDouble);
  seconds[comm.rank()] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  comm.allreduce_sum(scores);  // ranks with fewer volumes still take part
  comm.allreduce_sum(seconds);
  out.rank_seconds.assign(seconds.data_ptr<double>(),
                          seconds.data_ptr<double>() + comm.world_size());
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

double validation_dice(Model& net, const std::vector<ImageLabelPair>& val, const TrainOptions& o,
                       const RankPlan& plan, Communicator& comm) {
  return validation_scores(net, val, o, plan, comm).mean;
}

}  // namespace volshard
