// volshard: synthetic data, volume inspection (and, later, training).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "preview.h"
#include "volshard/datasets/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"volshard: deterministic data pipelines for 3D segmentation"};
  app.require_subcommand(1);
  app.footer(R"(
Examples:
  volshard synth --out data --count 40 --size 128 --seed 0
  volshard info data/img0.nii.gz data/seg0.nii.gz
  volshard info --json data/*.nii.gz
  volshard preview --data data --out crops.png --count 8 --seed 0
Exit status: 0 ok, 1 a file could not be read or written, 2 bad arguments.)");

  volshard::SynthOptions synth;
  synth.volume.num_seg_classes = 1;
  int64_t size = 128;
  auto* synth_cmd = app.add_subcommand("synth", "write MONAI-style synthetic image/label volumes (create_test_image_3d)");
  synth_cmd->add_option("--out", synth.out_dir, "output folder")->required();
  synth_cmd->add_option("--count", synth.count, "number of image/label pairs")->capture_default_str();
  synth_cmd->add_option("--size", size, "edge length of the cubic volumes")->capture_default_str();
  synth_cmd->add_option("--seed", synth.seed, "base seed; volume i uses a seed derived from (seed, i)")->capture_default_str();
  synth_cmd->add_option("--noise", synth.volume.noise_max, "uniform noise maximum (0: noise-free)")->capture_default_str();
  synth_cmd->add_option("--classes", synth.volume.num_seg_classes, "segmentation classes")->capture_default_str();
  synth_cmd->add_option("--threads", synth.threads, "writer threads (output does not depend on it)")->capture_default_str();

  std::vector<std::string> files;
  bool json = false;
  auto* info_cmd = app.add_subcommand("info", "shape, dtype, spacing, affine and value range of NIfTI files");
  info_cmd->add_option("files", files, ".nii or .nii.gz files")->required();
  info_cmd->add_flag("--json", json, "one JSON object per line");

  volshard::PreviewOptions preview;
  auto* preview_cmd = app.add_subcommand("preview", "PNG of augmented crops (axial and coronal slices, label outlined)");
  preview_cmd->add_option("--data", preview.data_dir, "folder of img*/seg* volumes")->required();
  preview_cmd->add_option("--out", preview.out, "PNG to write")->capture_default_str();
  preview_cmd->add_option("--count", preview.count, "crops to show")->capture_default_str();
  preview_cmd->add_option("--seed", preview.seed, "base seed of the augmentation")->capture_default_str();
  preview_cmd->add_option("--epoch", preview.epoch, "epoch whose augmentation to show")->capture_default_str();
  preview_cmd->add_option("--crop", preview.crop, "crop edge in voxels")->capture_default_str();
  preview_cmd->add_option("--image-glob", preview.image_glob, "image file pattern")->capture_default_str();
  preview_cmd->add_option("--label-glob", preview.label_glob, "label file pattern")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "volshard: " << e.what() << "\nRun with --help for usage.\n";
    return 2;
  }

  try {
    if (*synth_cmd) {
      if (size < 1) throw std::invalid_argument("--size=" + std::to_string(size) + " must be >= 1");
      synth.volume.height = synth.volume.width = synth.volume.depth = size;
      if (isatty(STDERR_FILENO)) {
        synth.progress = [](int64_t done, int64_t count) {
          std::fprintf(stderr, "\rsynth %lld/%lld", static_cast<long long>(done), static_cast<long long>(count));
          if (done == count) std::fprintf(stderr, "\n");
        };
      }
      volshard::write_synthetic_dataset(synth);
      std::cout << "wrote " << synth.count << " image/label pairs to " << synth.out_dir << "\n";
      return 0;
    }
    if (*preview_cmd) {
      const int64_t drawn = volshard::write_preview(preview);
      std::cout << "wrote " << drawn << " crops to " << preview.out << "\n";
      return 0;
    }
    int status = 0;
    for (const auto& f : files) {
      try {
        const auto info = volshard::describe_volume(f);
        std::cout << (json ? volshard::to_json(info) + "\n" : volshard::to_text(info));
      } catch (const std::exception& e) {  // report and go on with the other files
        std::cerr << "volshard info: " << e.what() << "\n";
        status = 1;
      }
    }
    return status;
  } catch (const std::invalid_argument& e) {
    std::cerr << "volshard: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "volshard: error: " << e.what() << "\n";
    return 1;
  }
}
