// volshard synth: MONAI-style synthetic image/label volumes.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "std_commands.h"
#include "verbs.h"
#include "volshard/datasets/synthetic.h"
#include "volshard/datasets/synthetic_dataset.h"

namespace volshard::cli {

Run add_synth_command(CLI::App& app) {
  struct State {
    SynthOptions synth;
    int64_t size = 128;
    int rad_max = 0, rad_min = 0;  ///< 0: fit_radii's
  };
  auto s = std::make_shared<State>();
  s->synth.volume.num_seg_classes = 1;
  auto* cmd = app.add_subcommand("synth", verb_summary("synth"));
  cmd->footer("\nExample:\n  volshard synth --out data --count 40 --size 128 --seed 0");
  cmd->add_option("--out", s->synth.out_dir, "output folder")->required();
  cmd->add_option("--count", s->synth.count, "number of image/label pairs")->capture_default_str();
  cmd->add_option("--size", s->size, "edge length of the cubic volumes, voxels")
      ->capture_default_str();
  cmd->add_option("--seed", s->synth.seed, "base seed; volume i uses a seed derived from (seed, i)")
      ->capture_default_str();
  cmd->add_option("--noise", s->synth.volume.noise_max, "uniform noise maximum (0: noise-free)")
      ->capture_default_str();
  cmd->add_option("--classes", s->synth.volume.num_seg_classes, "segmentation classes")
      ->capture_default_str();
  cmd->add_option("--rad-max", s->rad_max,
                  "largest sphere radius, voxels, exclusive (default: MONAI's 30 when --size > "
                  "60, else (size - 1) / 2)");
  cmd->add_option("--rad-min", s->rad_min,
                  "smallest sphere radius, voxels (default: MONAI's 5 when --size > 60, else "
                  "rad_max / 6, at least 1)");
  cmd->add_option("--threads", s->synth.threads, "writer threads (output does not depend on it)")
      ->capture_default_str();
  return [s] {
    if (s->size < 1)
      throw std::invalid_argument("--size=" + std::to_string(s->size) + " must be >= 1");
    s->synth.volume.height = s->synth.volume.width = s->synth.volume.depth = s->size;
    fit_radii(s->synth.volume, s->size);
    if (s->rad_max > 0) s->synth.volume.rad_max = s->rad_max;
    if (s->rad_min > 0) s->synth.volume.rad_min = s->rad_min;
    if (::isatty(STDERR_FILENO)) {
      s->synth.progress = [](int64_t done, int64_t count) {
        std::fprintf(stderr, "\rsynth %lld/%lld", static_cast<long long>(done),
                     static_cast<long long>(count));
        if (done == count) std::fprintf(stderr, "\n");
      };
    }
    write_synthetic_dataset(s->synth);
    std::cout << "wrote " << s->synth.count << " image/label pairs to " << s->synth.out_dir << "\n";
    return 0;
  };
}

}  // namespace volshard::cli
