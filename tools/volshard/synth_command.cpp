// volshard synth: MONAI-style synthetic spheres, or a small Decathlon-style
// CT or MRI dataset.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "std_commands.h"
#include "verbs.h"
#include "volshard/volume_io/synthetic.h"
#include "volshard/volume_io/synthetic_dataset.h"
#include "volshard/volume_io/synthetic_decathlon.h"

namespace volshard::cli {

Run add_synth_command(CLI::App& app) {
  struct State {
    SynthOptions synth;
    std::string kind = "spheres";
    int64_t size = 0;
    CLI::Option* size_option = nullptr;  ///< not given: the kind's default size
    int rad_max = 0, rad_min = 0;        ///< 0: fit_radii's
    std::vector<CLI::Option*> spheres_only;
  };
  auto s = std::make_shared<State>();
  s->synth.volume.num_seg_classes = 1;
  auto* cmd = app.add_subcommand("synth", verb_summary("synth"));
  cmd->footer(
      "\nExamples:\n"
      "  volshard synth --out data --count 40 --size 128 --seed 0             # imgN/segN spheres\n"
      "  volshard synth --kind ct --out Task09 --count 8 --size 48 --seed 0   # 48x48x12 int16 HU\n"
      "  volshard synth --kind mri --out Task01 --count 8 --size 32 --seed 0  # 32x32x20x4 "
      "float32");
  cmd->add_option("--out", s->synth.out_dir, "output folder")->required();
  cmd->add_option(
         "--kind", s->kind,
         "spheres: MONAI's tutorial spheres (imgN/segN.nii.gz); ct: a Decathlon Task09-like "
         "spleen CT folder; mri: a Task01-like BraTS folder (dataset.json, imagesTr, "
         "labelsTr, imagesTs)")
      ->capture_default_str();
  cmd->add_option("--count", s->synth.count,
                  "spheres: image/label pairs; ct, mri: training cases, plus max(1, count / 4) "
                  "test images")
      ->capture_default_str();
  s->size_option = cmd->add_option(
      "--size", s->size,
      "voxels; spheres: edge of the cubic volumes (default 128); ct: in-plane edge, "
      "size / 4 slices (default 96, 16..512); mri: in-plane edge, size * 5 / 8 slices "
      "(default 64, 24..256)");
  cmd->add_option("--seed", s->synth.seed, "base seed; volume i uses a seed derived from (seed, i)")
      ->capture_default_str();
  s->spheres_only = {
      cmd->add_option("--noise", s->synth.volume.noise_max,
                      "spheres: uniform noise maximum (0: noise-free)")
          ->capture_default_str(),
      cmd->add_option("--classes", s->synth.volume.num_seg_classes, "spheres: segmentation classes")
          ->capture_default_str(),
      cmd->add_option("--rad-max", s->rad_max,
                      "spheres: largest sphere radius, voxels, exclusive (default: MONAI's 30 when "
                      "--size > 60, else (size - 1) / 2)"),
      cmd->add_option("--rad-min", s->rad_min,
                      "spheres: smallest sphere radius, voxels (default: MONAI's 5 when --size > "
                      "60, else rad_max / 6, at least 1)"),
  };
  cmd->add_option("--threads", s->synth.threads, "writer threads (output does not depend on it)")
      ->capture_default_str();
  return [s] {
    const SynthKind kind = parse_synth_kind(s->kind);  // the library checks and names every flag
    std::function<void(int64_t, int64_t)> progress;
    if (::isatty(STDERR_FILENO)) {
      progress = [](int64_t done, int64_t count) {
        std::fprintf(stderr, "\rsynth %lld/%lld", static_cast<long long>(done),
                     static_cast<long long>(count));
        if (done == count) std::fprintf(stderr, "\n");
      };
    }
    if (kind != SynthKind::kSpheres) {
      for (const CLI::Option* option : s->spheres_only) {
        if (option->count() > 0) {
          throw std::invalid_argument(option->get_name() + " applies to --kind=spheres only, not " +
                                      "--kind=" + s->kind);
        }
      }
      DecathlonSynthOptions d;
      d.out_dir = s->synth.out_dir;
      d.kind = kind;
      d.count = s->synth.count;
      d.size = s->size_option->count() > 0 ? s->size : default_decathlon_size(kind);
      (void)decathlon_shape(kind, d.size);  // refuses a bad --size before anything is written
      d.seed = s->synth.seed;
      d.threads = s->synth.threads;
      d.progress = progress;
      write_decathlon_dataset(d);
      const auto shape = decathlon_shape(kind, d.size);
      std::cout << "wrote " << d.count << " training and " << decathlon_test_count(d.count)
                << " test " << s->kind << " cases (" << shape[0] << " x " << shape[1] << " x "
                << shape[2] << (kind == SynthKind::kMri ? " x 4" : "") << ") and dataset.json to "
                << d.out_dir << "\n";
      return 0;
    }
    if (s->size_option->count() == 0) s->size = 128;
    if (s->size < 1)
      throw std::invalid_argument("--size=" + std::to_string(s->size) + " must be >= 1");
    s->synth.volume.height = s->synth.volume.width = s->synth.volume.depth = s->size;
    fit_radii(s->synth.volume, s->size);
    if (s->rad_max > 0) s->synth.volume.rad_max = s->rad_max;
    if (s->rad_min > 0) s->synth.volume.rad_min = s->rad_min;
    s->synth.progress = progress;
    write_synthetic_dataset(s->synth);
    std::cout << "wrote " << s->synth.count << " image/label pairs to " << s->synth.out_dir << "\n";
    return 0;
  };
}

}  // namespace volshard::cli
