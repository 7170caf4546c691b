// Rank 1 of 2 over 10 samples, epoch 0: PyTorch's DistributedSampler order.
#include <iostream>

#include "volshard/sampler/distributed_sampler.h"

int main() {
  volshard::DistributedSamplerOptions o;
  o.dataset_size = 10;
  o.num_replicas = 2;
  o.rank = 1;
  volshard::DistributedSampler sampler(o);
  std::cout << "sampler_consumer: " << sampler.num_samples() << " samples\n";
  return sampler.num_samples() == 5 ? 0 : 1;
}
