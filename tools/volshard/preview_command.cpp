// volshard preview: what the network is fed, as a picture.
#include <algorithm>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <vector>

#include "commands.h"
#include "verbs.h"
#include "volshard/datasets/preview.h"

namespace volshard::cli {

Run add_preview_command(CLI::App& app) {
  auto o = std::make_shared<PreviewOptions>();
  auto versus = std::make_shared<PredictionPreviewOptions>();
  auto* cmd = app.add_subcommand("preview", verb_summary("preview"));
  cmd->footer(
      "\nExamples:\n  volshard preview --data data --out crops.png --count 8 --seed 0 --crop 32\n"
      "  volshard preview --config configs/spleen.json --datalist Task09/dataset.json --crop 32 "
      "--out spleen_crops.png\n"
      "  volshard preview --image img15.nii.gz --label seg15.nii.gz --prediction pred15.nii.gz "
      "--out pred15.png");
  auto* data = cmd->add_option("--data", o->data_dir,
                               "folder of image/label pairs: the augmented crops training feeds");
  auto* datalist = cmd->add_option(
      "--datalist", o->datalist,
      "instead of --data: a datalist or Decathlon dataset.json (its \"training\" entries)");
  data->excludes(datalist);
  auto* prediction =
      cmd->add_option("--prediction", versus->prediction,
                      "instead of --data: a prediction (volshard predict) outlined beside "
                      "--label on --image's slices, with its Dice per class");
  data->excludes(prediction);
  datalist->excludes(prediction);
  cmd->add_option("--image", versus->image, "--prediction: the image it was made from")
      ->needs(prediction);
  cmd->add_option("--label", versus->label, "--prediction: the manual label")->needs(prediction);
  cmd->add_option("--out", o->out, "PNG to write")->capture_default_str();
  cmd->add_option("--count", o->count, "crops to show")->capture_default_str();
  cmd->add_option("--seed", o->seed, "base seed of the augmentation")->capture_default_str();
  cmd->add_option("--epoch", o->epoch, "epoch whose augmentation to show")->capture_default_str();
  cmd->add_option("--image-glob", o->image_glob, "image file pattern")->capture_default_str();
  cmd->add_option("--label-glob", o->label_glob, "label file pattern")->capture_default_str();
  cmd->add_option("--channel", o->channel, "image channel to draw (-1: every channel)")
      ->capture_default_str();
  // The pipeline as training runs it: its schema's flags, and a training
  // config's pipeline keys (CT and MRI prefixes included) with its data and seed.
  add_feed_flags(cmd, o->feed, {"data", "datalist", "image_glob", "label_glob", "seed"});
  return [o, versus, prediction] {
    if (prediction->count() > 0) {
      if (versus->image.empty() || versus->label.empty())
        throw std::invalid_argument("preview: --prediction needs --image and --label");
      versus->out = o->out;
      versus->channel = std::max<int64_t>(o->channel, 0);
      const std::vector<double> dice = write_prediction_preview(*versus);
      std::cout << "wrote " << o->out << " (Dice per class:";
      for (size_t c = 0; c < dice.size(); ++c) std::cout << ' ' << c + 1 << '=' << dice[c];
      std::cout << ")\n";
      return 0;
    }
    if (o->data_dir.empty() && o->datalist.empty())
      throw std::invalid_argument(
          "preview: give --data DIR or --datalist FILE (crops), or --prediction FILE");
    const int64_t drawn = write_preview(*o);
    std::cout << "wrote " << drawn << " crops to " << o->out << "\n";
    return 0;
  };
}

}  // namespace volshard::cli
