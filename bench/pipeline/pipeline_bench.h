#pragma once
// bench_pipeline's parts (main.cpp dispatches): the tutorial table against
// the numpy + torch baseline (tutorial.cpp), the CT and MRI pipelines of
// configs/*.json (decathlon.cpp), large volumes and memory (large.cpp), and
// what they measure with (measure.cpp).

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "volshard/datasets/feed.h"
#include "volshard/datasets/loader.h"
#include "volshard/datasets/rank_pipeline.h"

namespace volshard::bench {

double median(std::vector<double> v);

// The median over `runs` runs of units per second, where run() does the work
// and returns how many units it did (this VM's neighbours swing single runs
// by up to 2x).
template <class Run>
double median_per_second(int runs, Run run) {
  std::vector<double> rates;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double units = run(r);
    rates.push_back(units /
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(rates);
}

// Median milliseconds of fn over the volumes, `rounds` times each.
template <class Fn>
double stage_ms(int64_t volumes, int rounds, Fn fn) {
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    for (int64_t i = 0; i < volumes; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      fn(i);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return median(ms);
}

// The loader every table measures: batch 2 (the tutorial's), `workers` threads.
LoaderOptions bench_loader(int64_t workers);
// One rank's pipeline as volshard train and the Python Loader build it
// (RankPipeline): `feed` over `pairs` through `loader`, every item cached
// (`cached`, filled on 2 threads) or loaded on use.
std::unique_ptr<RankPipeline> rank_pipeline(const std::vector<ImageLabelPair>& pairs,
                                            const FeedOptions& feed, const LoaderOptions& loader,
                                            bool cached);
// Volumes per second of `pipeline`'s loader over `epochs` epochs of its
// `volumes` items (num_samples crops each), median of three runs.
double volumes_per_second(RankPipeline& pipeline, int64_t volumes, int epochs, int64_t num_samples);
// The ceiling of the files rows: volumes per second that `workers` threads
// reach running load_pair alone (read, scale, label indices; no crops),
// median of three runs of `epochs` passes over the volumes.
double loads_per_second(const SampleSource& load, int64_t volumes, int64_t workers, int epochs);
// This VM's memory bandwidth at the moment: bytes memcpy copies per second
// between two 64 MiB buffers (median of 9).
double memcpy_gb_per_s();
// Resident and peak-resident MB of this process (VmRSS, VmHWM).
double status_mb(const char* field);
// Starts a new peak: the kernel resets VmHWM to the current RSS (Linux >= 4.0).
void reset_peak_rss();
struct Usage {
  double user_s = 0, sys_s = 0;
  long minor_faults = 0;
};
Usage usage_now();
// The numpy + torch baseline's volumes per second (0 where it failed).
double python_baseline(const std::string& script, const std::string& dir, const char* mode,
                       int64_t workers, int epochs);

// What `--size N --crop M` (or `--ct`) measures, instead of the tutorial table.
struct LargeArgs {
  int64_t size = 0;  ///< N^3 synthetic float32 volumes; 0: the tutorial table
  bool ct = false;   ///< 512 x 512 x 200 int16 CT-like volumes instead
  int64_t crop = 96;
  int64_t volumes = 16;
  int epochs = 3;
  std::string source = "both";  ///< files | cached | both
};

// The tutorial pipeline from files and cached, 1 and 2 threads, against the
// baseline `script`; then where one volume's time goes.
void run_tutorial(const std::string& script, int64_t volumes, int epochs, bool tuned,
                  const std::filesystem::path& root);
// `--pipeline spleen|brats`: the CT or MRI pipeline on a synthetic Decathlon
// folder next to the tutorial pipeline on 128^3 spheres, both cached, 2
// threads, in the same run: the prefix's cost per volume (time, cache bytes)
// and the loader's throughput.
void run_pipeline(const std::string& name, int64_t size, int64_t crop, int64_t volumes, int epochs,
                  const std::filesystem::path& root);
// Per epoch: volumes/s, minor faults, user and system seconds, RSS; then the
// peak RSS of the run beside what the loader's bound allows: before + cache +
// k batches, k = prefetch_batches + 2 (the loader's buffer pool).
void run_large(const LargeArgs& args, const std::filesystem::path& root);

}  // namespace volshard::bench
