// `bench_pipeline --size N | --ct`: large volumes, first epochs and memory.
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
namespace {

// Writes `count` CT-like pairs: 512 x 512 x 200, image int16 in [-1000, 1000]
// (MONAI's synthetic spheres rescaled to Hounsfield-like units), label uint8.
std::vector<ImageLabelPair> write_ct_like(const std::filesystem::path& dir, int64_t count) {
  std::filesystem::create_directories(dir);
  std::vector<ImageLabelPair> pairs;
  Affine identity{};
  for (size_t r = 0; r < 4; ++r) identity[r][r] = 1.0;
  for (int64_t i = 0; i < count; ++i) {
    SyntheticOptions so;
    so.height = so.width = 512;
    so.depth = 200;
    so.rad_max = 60;
    so.rad_min = 10;
    so.num_seg_classes = 1;
    so.noise_max = 0.05;
    NumpyRandomState rng(static_cast<uint32_t>(i));
    const SyntheticVolume v = make_test_image_3d(so, rng);
    const std::vector<int64_t> shape{1, 512, 512, 200};
    const at::Tensor image =
        (at::from_blob(const_cast<float*>(v.image.data()), shape, at::kFloat) * 2000 - 1000)
            .round()
            .to(at::kShort);
    const at::Tensor label =
        at::from_blob(const_cast<int32_t*>(v.label.data()), shape, at::kInt).to(at::kByte);
    ImageLabelPair p;
    p.image = (dir / ("img" + std::to_string(i) + ".nii.gz")).string();
    p.label = (dir / ("seg" + std::to_string(i) + ".nii.gz")).string();
    write_volume(p.image, image, identity);
    write_volume(p.label, label, identity);
    pairs.push_back(p);
  }
  return pairs;
}

}  // namespace

// Per epoch: volumes/s, minor faults, user and system seconds, RSS; then the
// peak RSS of the run beside what the loader's bound allows: before + cache +
// k batches, k = prefetch_batches + 2 (the loader's buffer pool).
void run_large(const LargeArgs& args, const std::filesystem::path& root) {
  const double base_mb = status_mb("VmRSS:");
  std::vector<ImageLabelPair> pairs;
  std::string what;
  if (args.ct) {
    pairs = write_ct_like(root / "ct", args.volumes);
    what = "512 x 512 x 200 int16 CT-like";
  } else {
    SynthOptions synth;
    synth.out_dir = (root / "vol").string();
    synth.count = args.volumes;
    synth.volume.height = synth.volume.width = synth.volume.depth = args.size;
    synth.volume.num_seg_classes = 1;
    synth.volume.noise_max = 0.2;
    write_synthetic_dataset(synth);
    pairs = pairs_from_folder(synth.out_dir);
    what = std::to_string(args.size) + "^3 float32 (noisy)";
  }
  FeedOptions feed;
  feed.crop = {args.crop};
  const LoaderOptions o = bench_loader(2);
  const int64_t in_flight = o.prefetch_batches + 2;
  const double batch_mb = 2.0 * o.batch_size * feed.num_samples * static_cast<double>(args.crop) *
                          args.crop * args.crop * 4 / (1 << 20);
  std::printf(
      "large volumes: %lld %s .nii.gz volumes, %d epochs, batch %lld, %lld^3 x %lld crops, %lld "
      "threads;\n"
      "a batch is %.0f MB (image + label, float32); bound: peak RSS <= before + cache + %lld "
      "batches in flight (prefetch_batches %lld + 2)\n",
      static_cast<long long>(args.volumes), what.c_str(), args.epochs,
      static_cast<long long>(o.batch_size), static_cast<long long>(args.crop),
      static_cast<long long>(feed.num_samples), static_cast<long long>(o.workers), batch_mb,
      static_cast<long long>(in_flight), static_cast<long long>(o.prefetch_batches));
  std::printf("%-7s %5s | %7s %9s %9s %7s %7s %8s | %8s %8s %8s\n", "source", "epoch", "s",
              "volumes/s", "faults", "user s", "sys s", "RSS MB", "peak MB", "bound MB",
              "cache MB");
  std::printf("%s\n", std::string(108, '-').c_str());
  std::vector<std::string> first_epoch;  // per source: epoch 0's time against the later ones'
  const auto print_row = [](const char* mode, const std::string& epoch, double s,
                            const std::string& rate, const Usage& u0, const Usage& u1,
                            const char* peak, const char* bound, const char* cache) {
    std::printf("%-7s %5s | %7.2f %9s %9ld %7.1f %7.1f %8.0f | %8s %8s %8s\n", mode, epoch.c_str(),
                s, rate.c_str(), u1.minor_faults - u0.minor_faults, u1.user_s - u0.user_s,
                u1.sys_s - u0.sys_s, status_mb("VmRSS:"), peak, bound, cache);
  };
  for (const char* mode : {"files", "cached"}) {
    if (args.source != "both" && args.source != mode) continue;
    const bool cached = std::string(mode) == "cached";
    reset_peak_rss();
    const double before_mb = status_mb("VmRSS:");
    // Setup, timed apart from the epochs: the cache's fill and the loader's
    // reserve() (its batch buffers faulted in, as volshard train does).
    const Usage s0 = usage_now();
    const auto t_setup = std::chrono::steady_clock::now();
    {
      const auto pipeline = rank_pipeline(pairs, feed, o, cached);
      DataLoader& loader = pipeline->loader();
      const double cache_mb =
          cached ? static_cast<double>(pipeline->cache().cached_bytes()) / (1 << 20) : 0;
      const double reserved_mb = static_cast<double>(pipeline->reserved_bytes()) / (1 << 20);
      print_row(mode, "setup",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t_setup).count(),
                "", s0, usage_now(), "", "", "");
      std::vector<double> seconds;
      for (int e = 0; e < args.epochs; ++e) {
        std::vector<int64_t> indices(static_cast<size_t>(args.volumes));
        for (int64_t i = 0; i < args.volumes; ++i) indices[static_cast<size_t>(i)] = i;
        const Usage u0 = usage_now();
        const auto t0 = std::chrono::steady_clock::now();
        loader.start_epoch(indices, e);
        int64_t seen = 0;
        while (auto b = loader.next()) seen += b->image.size(0) / feed.num_samples;
        seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        const Usage u1 = usage_now();
        char peak[32] = "", bound[32] = "", cache_text[32] = "", rate[32] = "";
        std::snprintf(rate, sizeof rate, "%.1f", static_cast<double>(seen) / seconds.back());
        if (e + 1 == args.epochs) {
          std::snprintf(peak, sizeof peak, "%.0f", status_mb("VmHWM:"));
          std::snprintf(bound, sizeof bound, "%.0f", before_mb + cache_mb + in_flight * batch_mb);
          if (cached) std::snprintf(cache_text, sizeof cache_text, "%.0f", cache_mb);
        }
        print_row(mode, std::to_string(e), seconds.back(), rate, u0, u1, peak, bound, cache_text);
        std::fflush(stdout);
      }
      if (seconds.size() > 1) {
        const double later =
            std::accumulate(seconds.begin() + 1, seconds.end(), 0.0) / (seconds.size() - 1.0);
        char line[256];
        const LargeBlockStats blocks = large_block_stats();
        std::snprintf(line, sizeof line,
                      "%s: epoch 0 took %.2fx the later epochs' mean; setup reserved %.0f MB; "
                      "large blocks so far: %lld mapped, %lld reused, %lld unmapped",
                      mode, seconds[0] / later, reserved_mb, static_cast<long long>(blocks.mapped),
                      static_cast<long long>(blocks.reused),
                      static_cast<long long>(blocks.unmapped));
        first_epoch.push_back(line);
      }
    }
  }
  for (const std::string& line : first_epoch) std::printf("%s\n", line.c_str());
  std::printf(
      "(RSS before the runs: %.0f MB; setup: the cache's fill (cached) and the loader's "
      "reserve(),\n"
      "which faults in its batch buffers; files rows also hold each thread's volume being loaded;\n"
      "the peak is VmHWM, reset before each source)\n",
      base_mb);
}

}  // namespace volshard::bench
