// bench_pipeline: the MONAI DDP tutorial's data pipeline (RandCropByPosNegLabel
// 96^3 x 4, RandRotate90 p=0.5 axes (0,2), batch 2) on synthetic 128^3
// volumes, one rank, cached, for 1 and 2 loader threads.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "volshard/datasets/cache.h"
#include "volshard/datasets/synthetic.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/transforms/loader.h"
#include "volshard/transforms/transforms.h"

namespace {

using namespace volshard;

Sample to_sample(const SyntheticVolume& v) {
  Sample s;
  const auto& d = v.shape;
  s.image = at::from_blob(const_cast<float*>(v.image.data()), {1, d[0], d[1], d[2]}, at::kFloat).clone();
  s.label = at::from_blob(const_cast<int32_t*>(v.label.data()), {1, d[0], d[1], d[2]}, at::kInt).to(at::kFloat);
  s.image = scale_intensity(s.image);
  s.indices = std::make_shared<const LabelIndices>(label_indices(s.label));
  return s;
}

double run(const SampleSource& source, int64_t volumes, int64_t workers, int epochs) {
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = workers;
  DataLoader loader(source, tutorial_augmentation(), o);
  DistributedSamplerOptions so;
  so.dataset_size = volumes;
  DistributedSampler sampler(so);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t seen = 0;
  for (int e = 0; e < epochs; ++e) {
    sampler.set_epoch(e);
    loader.start_epoch(sampler.indices().to_vector(), e);
    while (auto b = loader.next()) seen += b->image.size(0) / 4;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(seen) / s;
}

}  // namespace

int main() {
  at::set_num_threads(1);
  const bool tuned = std::getenv("VOLSHARD_BENCH_UNTUNED_MALLOC") == nullptr && tune_allocator_for_volumes();
  const int64_t volumes = std::getenv("VOLSHARD_BENCH_QUICK") ? 8 : 20;
  SyntheticOptions so;
  so.num_seg_classes = 1;
  std::printf("tutorial pipeline, %lld synthetic 128^3 volumes, batch 2, 96^3 x 4 crops, rot90 p=0.5\n",
              static_cast<long long>(volumes));
  std::printf("malloc tuned for large buffers: %s\n", tuned ? "yes" : "no");
  std::printf("%-22s | %8s | %10s %10s\n", "data", "threads", "volumes/s", "crops/s");
  for (double noise : {0.0, 0.2}) {
    so.noise_max = noise;
    const auto made = make_volumes(so, 0, 0, volumes, 2);
    CacheOptions co;
    SampleCache cache([&](int64_t i) { return to_sample(made[static_cast<size_t>(i)]); }, volumes, co);
    for (int64_t workers : {1, 2}) {
      const double v = run(cache.source(), volumes, workers, 2);
      std::printf("%-22s | %8lld | %10.1f %10.1f\n", noise == 0.0 ? "noise-free, cached" : "noisy, cached",
                  static_cast<long long>(workers), v, 4 * v);
    }
  }
}
