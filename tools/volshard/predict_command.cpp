// volshard predict: segment a volume with a trained network.
#include <iostream>
#include <memory>

#include "commands.h"
#include "verbs.h"
#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/trainer/predict.h"

namespace volshard::cli {

Run add_predict_command(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  auto* cmd = app.add_subcommand("predict", verb_summary("predict"));
  cmd->footer(
      "\nExample:\n  volshard predict --model run/model.pt --config run/config.json \\\n"
      "    --image data/img0.nii.gz --out pred.nii.gz [--roi 96]\n"
      "A run's config.json gives validation's window (roi, or its crop when roi is 0), overlap\n"
      "and sw_batch_size; --roi, --overlap, --sw-batch-size or --whole-volume override them.");
  add_predict_flags(cmd, *o);  // PredictOptions' table (options.h)
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
