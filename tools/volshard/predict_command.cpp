// volshard predict: segment a volume with a trained UNet.
#include <iostream>
#include <map>
#include <memory>

#include "commands.h"
#include "volshard/trainer/train.h"

namespace volshard::cli {

Run add_predict_command(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  auto* cmd = app.add_subcommand(
      "predict", "segment a volume with a trained UNet; writes NIfTI with the input's affine");
  cmd->footer(
      "\nExample:\n  volshard predict --model run/model.pt --config run/config.json \\\n"
      "    --image data/img0.nii.gz --out pred.nii.gz --roi-size 96");
  cmd->add_option("--model", o->model_path, "state_dict .pt (model.pt, or MONAI's)")->required();
  cmd->add_option("--image", o->image_path, "NIfTI image to segment")->required();
  cmd->add_option("--out", o->out_path, "NIfTI to write")->required();
  std::map<std::string, PredictOutput> outputs;
  for (const auto& [name, v] : enum_names(PredictOutput{})) outputs.emplace(name, v);
  cmd->add_option("--output", o->output, "logits | prob | label")
      ->transform(CLI::CheckedTransformer(outputs, CLI::ignore_case))
      ->default_str(enum_name(o->output));
  cmd->add_option("--roi-size", o->roi, "sliding window edge, voxels (0: whole volume)")
      ->capture_default_str();
  cmd->add_option("--overlap", o->overlap, "sliding-window overlap fraction")->capture_default_str();
  add_model_flags(cmd, o->model);
  return [o] {
    predict(*o);
    std::cout << "wrote " << o->out_path << "\n";
    return 0;
  };
}

}  // namespace volshard::cli
