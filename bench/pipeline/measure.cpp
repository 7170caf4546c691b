// What bench_pipeline measures with: medians of rates, loader and load_pair
// throughput, memory bandwidth, RSS and rusage, the Python baseline.
#include "pipeline_bench.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "volshard/core/large_blocks.h"
#include "volshard/datasets/cache.h"
#include "volshard/datasets/datalist.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/loader.h"
#include "volshard/datasets/volume.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/transforms/transforms.h"
#include "volshard/volume_io/synthetic.h"
#include "volshard/volume_io/synthetic_dataset.h"
#include "volshard/volume_io/synthetic_decathlon.h"

namespace volshard::bench {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

LoaderOptions bench_loader(int64_t workers) {
  LoaderOptions lo;
  lo.batch_size = 2;
  lo.workers = workers;
  return lo;
}

std::unique_ptr<RankPipeline> rank_pipeline(const std::vector<ImageLabelPair>& pairs,
                                            const FeedOptions& feed, const LoaderOptions& loader,
                                            bool cached) {
  CacheOptions co;
  co.cache_rate = cached ? 1.0 : 0.0;
  return std::make_unique<RankPipeline>(pairs, feed, loader, co);
}

double volumes_per_second(RankPipeline& pipeline, int64_t volumes, int epochs,
                          int64_t num_samples) {
  DistributedSamplerOptions so;
  so.dataset_size = volumes;
  DistributedSampler sampler(so);
  return median_per_second(3, [&](int) {
    int64_t seen = 0;
    for (int e = 0; e < epochs; ++e) {
      sampler.set_epoch(e);
      pipeline.loader().start_epoch(sampler.iterate().to_vector(), e);
      while (auto b = pipeline.loader().next()) seen += b->image.size(0) / num_samples;
    }
    return static_cast<double>(seen);
  });
}

double loads_per_second(const SampleSource& load, int64_t volumes, int64_t workers, int epochs) {
  return median_per_second(3, [&](int) {
    std::atomic<int64_t> next{0};
    const int64_t total = volumes * epochs;
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < workers; ++w) {
      threads.emplace_back([&] {
        for (int64_t k; (k = next++) < total;) (void)load(k % volumes);
      });
    }
    for (auto& t : threads) t.join();
    return static_cast<double>(total);
  });
}

double memcpy_gb_per_s() {
  constexpr size_t kBytes = size_t{64} << 20;
  std::vector<char> a(kBytes, 1), b(kBytes, 2);
  return median_per_second(9, [&](int r) {
    std::memcpy(b.data(), a.data(), kBytes);
    a[static_cast<size_t>(r)] = b[kBytes - 1 - static_cast<size_t>(r)];  // keep the copies
    return static_cast<double>(kBytes) / 1e9;
  });
}

double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::strlen(field))) / 1024.0;
  }
  return 0;
}

void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

Usage usage_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec;
  };
  return {seconds(u.ru_utime), seconds(u.ru_stime), u.ru_minflt};
}

double python_baseline(const std::string& script, const std::string& dir, const char* mode,
                       int64_t workers, int epochs) {
  const std::string cmd = std::string(VOLSHARD_PYTHON) + " " + script + " " + dir + " " + mode +
                          " " + std::to_string(workers) + " " + std::to_string(epochs) +
                          " 2>/dev/null";
  double v = 0;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    if (std::fscanf(p, "%lf", &v) != 1) v = 0;
    if (pclose(p) != 0) v = 0;
  }
  return v;
}

}  // namespace volshard::bench
