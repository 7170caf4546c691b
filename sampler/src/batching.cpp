#include "volshard/sampler/batching.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace volshard {
namespace {

void check_batch_size(int64_t batch_size) {
  if (batch_size < 1) {
    throw std::invalid_argument("BatchView: batch_size=" + std::to_string(batch_size) +
                                " must be >= 1");
  }
}

}  // namespace

int64_t steps_per_epoch(int64_t num_samples, int64_t batch_size, bool drop_last_batch) {
  check_batch_size(batch_size);
  return drop_last_batch ? num_samples / batch_size
                         : num_samples / batch_size + (num_samples % batch_size != 0 ? 1 : 0);
}

int64_t max_steps_per_epoch(const ShardLayout& layout, int64_t batch_size, bool drop_last_batch) {
  // Rank 0 holds the most samples in every mode.
  return steps_per_epoch(layout.max_num_samples(), batch_size, drop_last_batch);
}

BatchView::BatchView(IndexSpan indices, int64_t batch_size, bool drop_last_batch)
    : indices_(indices),
      batch_size_(batch_size),
      num_batches_(steps_per_epoch(indices.size(), batch_size, drop_last_batch)) {}

IndexSpan BatchView::batch(int64_t b) const {
  if (b < 0 || b >= num_batches_) {
    throw std::out_of_range("BatchView: batch=" + std::to_string(b) + " out of range [0, " +
                            std::to_string(num_batches_) + ")");
  }
  const int64_t begin = b * batch_size_;
  const int64_t size = std::min(batch_size_, indices_.size() - begin);
  return {indices_.data() + begin, size};
}

}  // namespace volshard
