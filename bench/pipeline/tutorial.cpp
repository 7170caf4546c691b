// The tutorial table: the MONAI DDP tutorial's pipeline from files and cached
// against a numpy + torch DataLoader version in the same run, and its stages.
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

// Where one volume's time goes, one thread, median over the volumes.
void print_stages(const std::vector<ImageLabelPair>& pairs, const char* data) {
  const auto n = static_cast<int64_t>(pairs.size());
  const int rounds = 2;
  ReadOptions c_order, file_order, compact;
  c_order.as_float = file_order.as_float = compact.as_float = true;
  file_order.layout = VolumeLayout::kFileOrderView;
  compact.uint8_if_it_fits = true;
  std::vector<at::Tensor> images, labels, compact_labels;
  for (const auto& p : pairs) {
    images.push_back(read_volume(p.image, c_order).data);
    labels.push_back(read_volume(p.label, c_order).data);
    compact_labels.push_back(read_volume(p.label, compact).data);
  }
  const PairOptions trained = feed_prefix();
  const Compose augment = feed_augmentation(FeedOptions{});
  const auto row = [&](const char* stage, auto fn) {
    std::printf("%-11s | %-44s | %8.2f\n", data, stage, stage_ms(n, rounds, fn));
  };
  const auto pair = [&](int64_t i) -> const ImageLabelPair& {
    return pairs[static_cast<size_t>(i)];
  };
  row("read image, C order", [&](int64_t i) { read_volume(pair(i).image, c_order); });
  row("read image, file-order view", [&](int64_t i) { read_volume(pair(i).image, file_order); });
  row("read label (int32 on disk) as float, C order",
      [&](int64_t i) { read_volume(pair(i).label, c_order); });
  row("read label (int32 on disk) as uint8, C order",
      [&](int64_t i) { read_volume(pair(i).label, compact); });
  row("ScaleIntensity", [&](int64_t i) { scale_intensity(images[static_cast<size_t>(i)]); });
  row("label indices, float32 label",
      [&](int64_t i) { label_indices(labels[static_cast<size_t>(i)]); });
  row("label indices, uint8 label",
      [&](int64_t i) { label_indices(compact_labels[static_cast<size_t>(i)]); });
  row("load_pair, float32 label", [&](int64_t i) { load_pair(pair(i), i); });
  row("load_pair, uint8 label (as trained)", [&](int64_t i) { load_pair(pair(i), i, trained); });
  for (const VolumeLayout layout : {VolumeLayout::kContiguous, VolumeLayout::kFileOrderView}) {
    PairOptions po = trained;
    po.image_layout = layout;
    std::vector<Sample> cached;
    for (int64_t i = 0; i < n; ++i) cached.push_back(load_pair(pair(i), i, po));
    row(layout == VolumeLayout::kContiguous ? "4 crops + rot90 into batch rows, C-order image"
                                            : "4 crops + rot90 into batch rows, file-order image",
        [&](int64_t i) {
          collate(augment.lazy(cached[static_cast<size_t>(i)], static_cast<uint64_t>(i)),
                  at::kFloat);
        });
  }
}

}  // namespace

void run_tutorial(const std::string& script, int64_t volumes, int epochs, bool tuned,
                  const std::filesystem::path& root) {
  const double bandwidth_before = memcpy_gb_per_s();
  std::printf(
      "tutorial pipeline, %lld synthetic 128^3 .nii.gz volumes x %d epochs, batch 2, 96^3 x 4 "
      "crops, "
      "rot90 p=0.5; volshard: median of 3 runs; malloc tuned: %s\n",
      static_cast<long long>(volumes), epochs, tuned ? "yes" : "no");
  std::printf("%-11s %-7s | %7s | %12s %9s | %15s %7s | %14s\n", "data", "source", "threads",
              "volshard v/s", "crops/s", "numpy+torch v/s", "ratio", "load_pair v/s");
  std::printf("%s\n", std::string(101, '-').c_str());
  std::vector<std::pair<std::string, std::vector<ImageLabelPair>>> stage_data;
  for (double noise : {0.0, 0.2}) {
    const auto dir = root / (noise == 0.0 ? "clean" : "noisy");
    SynthOptions synth;
    synth.out_dir = dir.string();
    synth.count = volumes;
    synth.volume.num_seg_classes = 1;
    synth.volume.noise_max = noise;
    write_synthetic_dataset(synth);
    const auto pairs = pairs_from_folder(dir.string());
    stage_data.emplace_back(noise == 0.0 ? "noise-free" : "noisy", pairs);
    const PairOptions loading = feed_prefix();
    const SampleSource from_files = [&](int64_t i) {
      return load_pair(pairs[static_cast<size_t>(i)], i, loading);
    };
    for (const char* mode : {"files", "cached"}) {
      const bool cached = std::string(mode) == "cached";
      for (int64_t workers : {1, 2}) {
        const FeedOptions tutorial;  // MONAI's DDP tutorial: 96^3 x 4 crops, rot90 p=0.5
        const auto pipeline = rank_pipeline(pairs, tutorial, bench_loader(workers), cached);
        const double ours = volumes_per_second(*pipeline, volumes, epochs, tutorial.num_samples);
        const double base = python_baseline(script, dir.string(), mode, workers, epochs);
        char base_text[32] = "n/a", ratio[32] = "n/a", ceiling[32] = "";
        if (base > 0) {
          std::snprintf(base_text, sizeof base_text, "%.1f", base);
          std::snprintf(ratio, sizeof ratio, "%.1fx", ours / base);
        }
        if (!cached) {
          std::snprintf(ceiling, sizeof ceiling, "%.1f",
                        loads_per_second(from_files, volumes, workers, epochs));
        }
        std::printf("%-11s %-7s | %7lld | %12.1f %9.1f | %15s %7s | %14s\n",
                    noise == 0.0 ? "noise-free" : "noisy", mode, static_cast<long long>(workers),
                    ours, 4 * ours, base_text, ratio, ceiling);
      }
    }
  }
  std::printf(
      "(load_pair v/s: the same threads running only load_pair, as trained (read, scale, label\n"
      "indices): the ceiling of the files rows, whatever the crops cost)\n");
  std::printf(
      "memcpy of 64 MiB, one thread: %.1f GB/s before the table, %.1f GB/s after it (this VM's\n"
      "neighbours move it from run to run)\n",
      bandwidth_before, memcpy_gb_per_s());
  std::printf(
      "\nper 128^3 volume, one thread, median ms (MONAI 1.4.0 on this kind of machine, platform "
      "notes: LoadImaged\n"
      "image + label 42, ScaleIntensityd 11.8, RandCropByPosNegLabeld 12.9, RandRotate90d 4.7)\n");
  std::printf("%-11s | %-44s | %8s\n", "data", "stage", "ms");
  std::printf("%s\n", std::string(69, '-').c_str());
  for (const auto& [name, pairs] : stage_data) print_stages(pairs, name.c_str());
  std::printf(
      "MONAI 1.4.0 on this kind of machine (platform notes, not this run): 12.6 v/s from files, "
      "15.6 with\n"
      "CacheDataset, 20.8 with CacheDataset + ThreadDataLoader, 11.9 on noisy files (2 "
      "workers).\n");
}

}  // namespace volshard::bench
