// volshard preview: what the network is fed, as a picture.
#include <iostream>
#include <memory>

#include "commands.h"
#include "verbs.h"
#include "volshard/datasets/preview.h"

namespace volshard::cli {

Run add_preview_command(CLI::App& app) {
  auto o = std::make_shared<PreviewOptions>();
  auto* cmd = app.add_subcommand("preview", verb_summary("preview"));
  cmd->footer(
      "\nExample:\n  volshard preview --data data --out crops.png --count 8 --seed 0 --crop 32");
  cmd->add_option("--data", o->data_dir, "folder of image/label pairs")->required();
  cmd->add_option("--out", o->out, "PNG to write")->capture_default_str();
  cmd->add_option("--count", o->count, "crops to show")->capture_default_str();
  cmd->add_option("--seed", o->seed, "base seed of the augmentation")->capture_default_str();
  cmd->add_option("--epoch", o->epoch, "epoch whose augmentation to show")->capture_default_str();
  cmd->add_option("--image-glob", o->image_glob, "image file pattern")->capture_default_str();
  cmd->add_option("--label-glob", o->label_glob, "label file pattern")->capture_default_str();
  cmd->add_option("--crop", o->feed.crop, "RandCropByPosNegLabel edge, voxels (cubic)")
      ->capture_default_str();
  cmd->add_option("--num-samples", o->feed.num_samples, "crops per volume")->capture_default_str();
  cmd->add_flag("--allow-smaller", o->feed.allow_smaller,
                "crops larger than a volume shrink to it");
  cmd->add_option("--channel", o->channel, "image channel to draw (-1: every channel)")
      ->capture_default_str();
  cmd->add_option("--rot90-prob", o->feed.rot90_prob, "RandRotate90 probability")
      ->capture_default_str();
  return [o] {
    const int64_t drawn = write_preview(*o);
    std::cout << "wrote " << drawn << " crops to " << o->out << "\n";
    return 0;
  };
}

}  // namespace volshard::cli
