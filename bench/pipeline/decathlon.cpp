// `bench_pipeline --pipeline spleen|brats`: the CT and MRI pipelines of configs/*.json.
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

// configs/spleen.json or configs/brats.json's pipeline, read as `volshard
// train` and the Python Loader read it (the schema in datasets/feed.h), the
// crop as given and the label check volshard train derives from the network
// (softmax over 2 classes; Task01's labels 0-3).
FeedOptions pipeline_feed(const std::string& name, int64_t crop) {
  FeedOptions f = feed_from_config(std::string(VOLSHARD_CONFIGS_DIR) + "/" + name + ".json");
  f.crop = {crop};
  f.prefix.num_classes = name == "spleen" ? 2 : 4;
  return f;
}

// The spleen prefix step by step on one thread (median ms a volume, in the
// notebook's order), beside each step's memory floor: the bytes it must read
// and write at least (its input and output tensors once each, the label's
// too) at this machine's memcpy rate measured in the same run. Decompression
// is compute, not copying: its floor is only writing the voxels out.
void print_spleen_stages(const std::vector<ImageLabelPair>& pairs, const PrefixOptions& p) {
  const auto n = static_cast<int64_t>(pairs.size());
  const int rounds = 2;
  ReadOptions image_read, label_read;
  image_read.as_float = label_read.as_float = true;
  label_read.uint8_if_it_fits = true;
  struct Steps {
    SpatialImage image, label;
  };
  std::vector<Volume> images, labels;
  std::vector<Steps> windowed, cropped, oriented;
  for (const auto& pair : pairs) {
    images.push_back(read_volume(pair.image, image_read));
    labels.push_back(read_volume(pair.label, label_read));
    Steps s{{scale_intensity_range(images.back().data, p.range), images.back().affine},
            {labels.back().data, images.back().affine}};
    windowed.push_back(s);
    const VoxelBox box = foreground_box(s.image.data, p.foreground_margin);
    s = {crop_box(s.image, box), crop_box(s.label, box)};
    cropped.push_back(s);
    oriented.push_back({orient(s.image, p.orientation), orient(s.label, p.orientation)});
  }
  const std::array<double, 3> pixdim{p.pixdim[0], p.pixdim[1], p.pixdim[2]};
  const auto mb = [](const at::Tensor& t) { return static_cast<double>(t.nbytes()) / 1e6; };
  const double gbps = memcpy_gb_per_s();  // bytes copied a second: each read once, written once
  const auto at = [](auto& v, int64_t i) -> auto& { return v[static_cast<size_t>(i)]; };
  double total_ms = 0, total_floor = 0;
  std::printf(
      "\nthe spleen prefix step by step, one thread, median ms a volume (memcpy here: %.1f "
      "GB/s)\n",
      gbps);
  std::printf("%-44s | %8s %10s %8s\n", "step", "ms", "floor MB", "floor ms");
  const auto row = [&](const char* step, double floor_mb, auto fn) {
    const double ms = stage_ms(n, rounds, fn);
    const double floor_ms = floor_mb / 1e3 / gbps * 1e3;
    total_ms += ms;
    total_floor += floor_ms;
    std::printf("%-44s | %8.1f %10.1f %8.1f\n", step, ms, floor_mb, floor_ms);
  };
  const double voxels_mb = mb(at(images, 0).data), label_mb = mb(at(labels, 0).data);
  row("read image (int16 .nii.gz) as float32", voxels_mb,
      [&](int64_t i) { read_volume(at(pairs, i).image, image_read); });
  row("read label as uint8", label_mb,
      [&](int64_t i) { read_volume(at(pairs, i).label, label_read); });
  row("ScaleIntensityRange (window, clip)", 2 * voxels_mb,
      [&](int64_t i) { scale_intensity_range(at(images, i).data, p.range); });
  row("CropForeground (box, image and label)",
      voxels_mb + mb(at(cropped, 0).image.data) + mb(at(cropped, 0).label.data), [&](int64_t i) {
        const Steps& s = at(windowed, i);
        const VoxelBox box = foreground_box(s.image.data, p.foreground_margin);
        crop_box(s.image, box);
        crop_box(s.label, box);
      });
  row("Orientation RAS (image and label)",
      2 * (mb(at(cropped, 0).image.data) + mb(at(cropped, 0).label.data)), [&](int64_t i) {
        orient(at(cropped, i).image, p.orientation);
        orient(at(cropped, i).label, p.orientation);
      });
  const SpatialImage spaced = spacing(at(oriented, 0).image, pixdim, Interpolation::kBilinear);
  row("Spacing image (trilinear)", mb(at(oriented, 0).image.data) + mb(spaced.data),
      [&](int64_t i) { spacing(at(oriented, i).image, pixdim, Interpolation::kBilinear); });
  row("Spacing label (nearest)",
      mb(at(oriented, 0).label.data) + mb(spaced.data) / 4,  // uint8 in, the same voxels out
      [&](int64_t i) {
        const SpatialImage& l = at(oriented, i).label;
        spacing({l.data.to(at::kFloat), l.affine}, pixdim, Interpolation::kNearest);
      });
  std::vector<at::Tensor> spaced_labels;
  for (const Steps& s : oriented)
    spaced_labels.push_back(
        spacing({s.label.data.to(at::kFloat), s.label.affine}, pixdim, Interpolation::kNearest)
            .data.to(at::kByte));
  row("label indices", mb(spaced.data) / 4,
      [&](int64_t i) { label_indices(at(spaced_labels, i)); });
  std::printf("%-44s | %8.1f %10s %8.1f\n", "sum of the steps", total_ms, "", total_floor);
  PairOptions po;
  po.prefix = p;
  po.compact_label = true;
  std::printf("%-44s | %8.1f\n", "load_pair (the whole prefix, as cached)",
              stage_ms(n, rounds, [&](int64_t i) { load_pair(at(pairs, i), i, po); }));
  std::printf(
      "(floor: the step's input and output bytes at memcpy's rate; sizes of volume 0: %.0f "
      "MB float32 read, %.0f MB after the crop, %.0f MB spaced)\n",
      voxels_mb, mb(at(cropped, 0).image.data), mb(spaced.data));
}

}  // namespace

// `--pipeline spleen|brats`: the CT or MRI pipeline on a synthetic Decathlon
// folder next to the tutorial pipeline on 128^3 spheres, both cached, 2
// threads, in the same run: the prefix's cost per volume (time, cache bytes)
// and the loader's throughput.
void run_pipeline(const std::string& name, int64_t size, int64_t crop, int64_t volumes, int epochs,
                  const std::filesystem::path& root) {
  DecathlonSynthOptions d;
  d.out_dir = (root / name).string();
  d.kind = name == "spleen" ? SynthKind::kCt : SynthKind::kMri;
  d.count = volumes;
  d.size = size;
  write_decathlon_dataset(d);
  const auto pairs = pairs_from_datalist(d.out_dir + "/dataset.json");
  SynthOptions synth;
  synth.out_dir = (root / "tutorial").string();
  synth.count = volumes;
  synth.volume.num_seg_classes = 1;
  write_synthetic_dataset(synth);
  const auto tutorial_pairs = pairs_from_folder(synth.out_dir);
  const FeedOptions feed = pipeline_feed(name, crop);
  FeedOptions tutorial;
  tutorial.crop = {crop};
  const auto shape = decathlon_shape(d.kind, size);
  std::printf(
      "%s pipeline (configs/%s.json, crop %lld^3 x %lld) on %lld synthetic %lld x %lld x %lld "
      "%s volumes\nnext to the tutorial pipeline (crop %lld^3 x 4) on %lld 128^3 spheres; "
      "cached, 2 threads, batch 2, %d epochs, median of 3\n",
      name.c_str(), name.c_str(), static_cast<long long>(crop),
      static_cast<long long>(feed.num_samples), static_cast<long long>(volumes),
      static_cast<long long>(shape[0]), static_cast<long long>(shape[1]),
      static_cast<long long>(shape[2]), name == "spleen" ? "int16 CT" : "4-channel MRI",
      static_cast<long long>(crop), static_cast<long long>(volumes), epochs);
  std::printf("%-9s | %12s %13s %14s | %12s %9s | %7s\n", "pipeline", "prefix ms/v", "file MB/v",
              "cache MB/v", "volumes/s", "crops/s", "ratio");
  std::printf("%s\n", std::string(92, '-').c_str());
  double tutorial_rate = 0;
  for (const bool ct : {false, true}) {
    const auto& list = ct ? pairs : tutorial_pairs;
    const FeedOptions& f = ct ? feed : tutorial;
    const PairOptions prefix = feed_prefix(f);
    const SampleSource load = [&](int64_t i) {
      return load_pair(list[static_cast<size_t>(i)], i, prefix);
    };
    const double prefix_ms = 1000.0 / loads_per_second(load, volumes, 1, 1);
    double file_mb = 0;
    for (const auto& p : list)
      file_mb += static_cast<double>(std::filesystem::file_size(p.image) +
                                     std::filesystem::file_size(p.label));
    file_mb /= static_cast<double>(volumes) * (1 << 20);
    const auto pipeline = rank_pipeline(list, f, bench_loader(2), true);
    const double cache_mb =
        static_cast<double>(pipeline->cache().cached_bytes()) / volumes / (1 << 20);
    const double rate = volumes_per_second(*pipeline, volumes, epochs, f.num_samples);
    if (!ct) tutorial_rate = rate;
    std::printf("%-9s | %12.0f %13.1f %14.1f | %12.1f %9.1f | %7.2f\n",
                ct ? name.c_str() : "tutorial", prefix_ms, file_mb, cache_mb, rate,
                rate * static_cast<double>(f.num_samples), rate / tutorial_rate);
    std::fflush(stdout);
  }
  std::printf(
      "(prefix ms/v: one thread's load_pair per volume, read to cached sample; file MB/v: the "
      ".nii.gz image + label;\ncache MB/v: the prepared prefix held per volume; ratio: volumes/s "
      "over the tutorial's)\n");
  if (name == "spleen") print_spleen_stages(pairs, feed.prefix);
}

}  // namespace volshard::bench
