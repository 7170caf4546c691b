// bench_pipeline: the MONAI DDP tutorial's data pipeline (LoadImage,
// ScaleIntensity, RandCropByPosNegLabel 96^3 x 4, RandRotate90 p=0.5 axes
// (0,2), batch 2) on synthetic 128^3 .nii.gz volumes, one rank, from files and
// cached, for 1 and 2 loader threads, against a numpy + torch DataLoader
// version of the same pipeline measured in the same run; then where one
// volume's time goes, stage by stage.
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
#include "volshard/volume_io/synthetic.h"
#include "volshard/volume_io/synthetic_dataset.h"
#include "volshard/volume_io/synthetic_decathlon.h"
#include "volshard/datasets/volume.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/transforms/transforms.h"

namespace {

using namespace volshard;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

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

// Volumes per second over `epochs` epochs, median of three runs.
double volumes_per_second(const SampleSource& source, int64_t volumes, int64_t workers,
                          int epochs, const FeedOptions& feed = {}) {
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = workers;
  DataLoader loader(source, feed_augmentation(feed), o);
  DistributedSamplerOptions so;
  so.dataset_size = volumes;
  DistributedSampler sampler(so);
  return median_per_second(3, [&](int) {
    int64_t seen = 0;
    for (int e = 0; e < epochs; ++e) {
      sampler.set_epoch(e);
      loader.start_epoch(sampler.iterate().to_vector(), e);
      while (auto b = loader.next()) seen += b->image.size(0) / feed.num_samples;
    }
    return static_cast<double>(seen);
  });
}

double loads_per_second(const SampleSource& load, int64_t volumes, int64_t workers, int epochs);
void print_spleen_stages(const std::vector<ImageLabelPair>& pairs, const PrefixOptions& p);

// configs/spleen.json or configs/brats.json's pipeline, read as `volshard
// train` and the Python Loader read it (the schema in datasets/feed.h), the
// crop as given and the label check volshard train derives from the network
// (softmax over 2 classes; Task01's labels 0-3).
FeedOptions pipeline_feed(const std::string& name, int64_t crop) {
  FeedOptions f = feed_from_config(std::string(VOLSHARD_CONFIGS_DIR) + "/" + name + ".json");
  f.crop = crop;
  f.prefix.num_classes = name == "spleen" ? 2 : 4;
  return f;
}

// `--pipeline spleen|brats`: the CT or MRI pipeline on a synthetic Decathlon
// folder next to the tutorial pipeline on 128^3 spheres, both cached, 2
// threads, in the same run: the prefix's cost per volume (time, cache bytes)
// and the loader's throughput.
void run_pipeline(const std::string& name, int64_t size, int64_t crop, int64_t volumes,
                  int epochs, const std::filesystem::path& root) {
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
  tutorial.crop = crop;
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
    CacheOptions co;
    co.threads = 2;
    const SampleCache cache(load, volumes, co);
    const double cache_mb = static_cast<double>(cache.cached_bytes()) / volumes / (1 << 20);
    const double rate = volumes_per_second(cache.source(), volumes, 2, epochs, f);
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

// The ceiling of the files rows: volumes per second that `workers` threads
// reach running load_pair alone (read, scale, label indices; no crops),
// median of three runs of `epochs` passes over the volumes.
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

// This VM's memory bandwidth at the moment: bytes memcpy copies per second
// between two 64 MiB buffers (median of 9). Decompressing, scaling and
// cropping one volume writes and reads on the order of 100 MB, so a run's
// rows are read next to it.
double memcpy_gb_per_s() {
  constexpr size_t kBytes = size_t{64} << 20;
  std::vector<char> a(kBytes, 1), b(kBytes, 2);
  return median_per_second(9, [&](int r) {
    std::memcpy(b.data(), a.data(), kBytes);
    a[static_cast<size_t>(r)] = b[kBytes - 1 - static_cast<size_t>(r)];  // keep the copies
    return static_cast<double>(kBytes) / 1e9;
  });
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

// Resident and peak-resident MB of this process (VmRSS, VmHWM).
double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::strlen(field))) / 1024.0;
  }
  return 0;
}

// Starts a new peak: the kernel resets VmHWM to the current RSS (Linux >= 4.0).
void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

struct Usage {
  double user_s = 0, sys_s = 0;
  long minor_faults = 0;
};

Usage usage_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec;
  };
  return {seconds(u.ru_utime), seconds(u.ru_stime), u.ru_minflt};
}

// What `--size N --crop M` (or `--ct`) measures, instead of the tutorial table.
struct LargeArgs {
  int64_t size = 0;  ///< N^3 synthetic float32 volumes; 0: the tutorial table
  bool ct = false;   ///< 512 x 512 x 200 int16 CT-like volumes instead
  int64_t crop = 96;
  int64_t volumes = 16;
  int epochs = 3;
  std::string source = "both";  ///< files | cached | both
};

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
  feed.crop = args.crop;
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = 2;
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
  const PairOptions loading = feed_prefix();
  const SampleSource from_files = [&](int64_t i) {
    return load_pair(pairs[static_cast<size_t>(i)], i, loading);
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
    std::optional<SampleCache> cache;
    if (cached) cache.emplace(from_files, args.volumes, CacheOptions{});
    const double cache_mb = cached ? static_cast<double>(cache->cached_bytes()) / (1 << 20) : 0;
    {
      DataLoader loader(cached ? cache->source() : from_files, feed_augmentation(feed), o);
      const double reserved_mb = static_cast<double>(loader.reserve()) / (1 << 20);
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

double python_baseline(const std::string& script, const std::string& dir, const char* mode,
                       int64_t workers, int epochs) {
  const std::string cmd = std::string(VOLSHARD_PYTHON) + " " + script + " " + dir + " " + mode + " " +
                          std::to_string(workers) + " " + std::to_string(epochs) + " 2>/dev/null";
  double v = 0;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    if (std::fscanf(p, "%lf", &v) != 1) v = 0;
    if (pclose(p) != 0) v = 0;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string script = "bench/pipeline_baseline.py";
  LargeArgs large;
  std::string pipeline;  // spleen | brats
  int64_t pipeline_size = 0;
  for (int k = 1; k < argc; ++k) {
    const std::string a = argv[k];
    const auto value = [&]() -> std::string {
      if (k + 1 >= argc) throw std::invalid_argument("bench_pipeline: " + a + " needs a value");
      return argv[++k];
    };
    if (a == "--size") {
      large.size = std::stoll(value());
    } else if (a == "--crop") {
      large.crop = std::stoll(value());
    } else if (a == "--ct") {
      large.ct = true;
    } else if (a == "--pipeline") {
      pipeline = value();
      if (pipeline != "spleen" && pipeline != "brats")
        throw std::invalid_argument("bench_pipeline: --pipeline=" + pipeline +
                                    " must be spleen or brats");
    } else if (a == "--pipeline-size") {
      pipeline_size = std::stoll(value());
    } else if (a == "--volumes") {
      large.volumes = std::stoll(value());
    } else if (a == "--epochs") {
      large.epochs = std::stoi(value());
    } else if (a == "--source") {
      large.source = value();
      if (large.source != "files" && large.source != "cached" && large.source != "both")
        throw std::invalid_argument("bench_pipeline: --source=" + large.source +
                                    " must be files, cached or both");
    } else if (a.rfind("--", 0) == 0) {
      throw std::invalid_argument("bench_pipeline: unknown option " + a);
    } else {
      script = a;
    }
  }
  at::set_num_threads(1);
  const bool tuned =
      std::getenv("VOLSHARD_BENCH_UNTUNED_MALLOC") == nullptr && tune_allocator_for_volumes();
  const bool quick = std::getenv("VOLSHARD_BENCH_QUICK") != nullptr;
  const int64_t volumes = quick ? 8 : 24;
  const int epochs = 2;
  const auto root = std::filesystem::temp_directory_path() /
                    ("volshard_bench_pipeline_" + std::to_string(::getpid()));
  if (!pipeline.empty()) {
    const int64_t size = pipeline_size > 0 ? pipeline_size : (pipeline == "spleen" ? 384 : 128);
    run_pipeline(pipeline, size, large.crop, quick ? 4 : large.volumes, large.epochs, root);
    std::filesystem::remove_all(root);
    return 0;
  }
  if (large.size > 0 || large.ct) {
    std::printf("malloc tuned: %s\n", tuned ? "yes" : "no");
    run_large(large, root);
    std::filesystem::remove_all(root);
    return 0;
  }

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
    CacheOptions co;
    const SampleCache cache(from_files, volumes, co);
    for (const char* mode : {"files", "cached"}) {
      const bool cached = std::string(mode) == "cached";
      for (int64_t workers : {1, 2}) {
        const double ours =
            volumes_per_second(cached ? cache.source() : from_files, volumes, workers, epochs);
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
  std::filesystem::remove_all(root);
  std::printf(
      "MONAI 1.4.0 on this kind of machine (platform notes, not this run): 12.6 v/s from files, "
      "15.6 with\n"
      "CacheDataset, 20.8 with CacheDataset + ThreadDataLoader, 11.9 on noisy files (2 "
      "workers).\n");
  std::printf("peak RSS of this run: %.0f MB\n", status_mb("VmHWM:"));
}
