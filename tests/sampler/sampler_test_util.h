#pragma once
// Shared by the sampler tests: options in one line.

#include <cstdint>

#include "volshard/sampler/distributed_sampler.h"

namespace volshard::test {

inline DistributedSamplerOptions sampler_options(int64_t n, int64_t w, int64_t rank = 0,
                                                 PartitionMode mode = PartitionMode::kPad,
                                                 bool shuffle = true, uint64_t seed = 0) {
  DistributedSamplerOptions o;
  o.dataset_size = n;
  o.num_replicas = w;
  o.rank = rank;
  o.mode = mode;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

}  // namespace volshard::test
