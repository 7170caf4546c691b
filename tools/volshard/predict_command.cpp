// volshard predict: segment a volume with a trained UNet.
#include <iostream>
#include <memory>

#include "commands.h"
#include "verbs.h"
#include "volshard/trainer/train.h"

namespace volshard::cli {

Run add_predict_command(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  auto* cmd = app.add_subcommand("predict", verb_summary("predict"));
  cmd->footer(
      "\nExample:\n  volshard predict --model run/model.pt --config run/config.json \\\n"
      "    --image data/img0.nii.gz --out pred.nii.gz --roi 96");
  cmd->add_option("--model", o->model_path, "state_dict .pt (model.pt, or MONAI's)")->required();
  cmd->add_option("--image", o->image_path, "NIfTI image to segment")->required();
  cmd->add_option("--out", o->out_path, "NIfTI to write")->required();
  add_enum_option(cmd, "--output", o->output, "what to write: logits, probabilities or labels");
  // --roi as train's; --roi-size is its old name, still accepted.
  cmd->add_option("--roi,--roi-size", o->roi,
                  "sliding-window edge, voxels (0: whole volume; --roi-size: old name)")
      ->capture_default_str();
  cmd->add_option("--overlap", o->overlap, "sliding-window overlap fraction")
      ->capture_default_str();
  add_predict_flags(cmd, *o);
  return [o] {
    predict(*o);
    std::cout << "wrote " << o->out_path << "\n";
    return 0;
  };
}

}  // namespace volshard::cli
