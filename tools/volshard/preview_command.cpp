// volshard preview: what the network is fed, as a picture.
#include <algorithm>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <vector>

#include "commands.h"
#include "verbs.h"

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
  // The picture's flags and the pipeline as training runs it: its schema's
  // flags, and a training config's pipeline keys (CT and MRI prefixes
  // included) with its data and seed.
  add_preview_flags(cmd, *o);
  auto* data = cmd->get_option("--data");
  auto* datalist = cmd->get_option("--datalist");
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
