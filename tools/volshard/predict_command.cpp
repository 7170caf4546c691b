// volshard predict: segment a volume with a trained network.
#include <iostream>
#include <memory>

#include "commands.h"
#include "verbs.h"
#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/trainer/train.h"

namespace volshard::cli {

Run add_predict_command(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  auto* cmd = app.add_subcommand("predict", verb_summary("predict"));
  cmd->footer(
      "\nExample:\n  volshard predict --model run/model.pt --config run/config.json \\\n"
      "    --image data/img0.nii.gz --out pred.nii.gz [--roi 96]\n"
      "A run's config.json gives validation's window (roi, or its crop when roi is 0), overlap\n"
      "and sw_batch_size; --roi, --overlap, --sw-batch-size or --whole-volume override them.");
  cmd->add_option("--model", o->model_path, "state_dict .pt (model.pt, or MONAI's)")->required();
  cmd->add_option("--image", o->image_path, "NIfTI image to segment")->required();
  cmd->add_option("--out", o->out_path, "NIfTI to write")->required();
  add_enum_option(cmd, "--output", o->output, "what to write: logits, probabilities or labels");
  // --roi as train's; --roi-size is its old name, still accepted.
  cmd->add_option("--roi,--roi-size", o->roi,
                  "sliding window, voxels: one edge (a cube) or x,y,z (0: the config's --crop, "
                  "as validation, or the whole volume without one; --roi-size: old name)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--overlap", o->overlap, "sliding-window overlap fraction")
      ->capture_default_str();
  cmd->add_option("--crop", o->crop,
                  "the training crop (a run's config.json): the window when --roi is 0")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--whole-volume", o->whole_volume,
                "the whole volume in one pass (no sliding window), whatever the config says");
  add_predict_flags(cmd, *o);
  return [o, cmd] {
    // The options' own check names --image and --model; the config file is this command's.
    const CLI::Option* config = cmd->get_option("--config");
    if (config->count() > 0)
      check_not_an_input(o->out_path, {{"--config", config->as<std::string>()}},
                         "predict: --out=" + printable(o->out_path));
    predict(*o);
    std::cout << "wrote " << o->out_path << " (" << o->inference_text() << ")\n";
    return 0;
  };
}

}  // namespace volshard::cli
