// volshard-torch: every subcommand, with LibTorch. The light `volshard`
// (light_main.cpp) runs this for train, predict, preview and repro with the
// same arguments; main() only parses the command line; each subcommand is a
// <verb>_command.cpp.
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "verbs.h"
#include "volshard/datasets/loader.h"  // tune_allocator_for_volumes

int main(int argc, char** argv) {
  // Before any thread starts (train's communicator has a heartbeat thread):
  // one malloc arena, large buffers kept (see tune_allocator_for_volumes).
  volshard::tune_allocator_for_volumes();
  namespace cli = volshard::cli;
  std::vector<char*> args;  // torch.distributed.launch's --local-rank=N taken out
  if (!cli::strip_local_rank_flag(argc, argv, args)) return 2;
  CLI::App app{"volshard: deterministic data pipelines for 3D segmentation", "volshard"};
  app.require_subcommand(1);
  app.footer(cli::kTopFooter);
  const std::vector<std::pair<std::string, cli::Run>> commands{
      {"synth", cli::add_synth_command(app)},
      {"info", cli::add_info_command(app)},
      {"preview", cli::add_preview_command(app)},
      {"train", cli::add_train_command(app, std::vector<std::string>(argv, argv + argc))},
      {"repro", cli::add_repro_command(app)},
      {"diff", cli::add_diff_command(app)},
      {"predict", cli::add_predict_command(app)},
      {"prepare", cli::add_prepare_command(app)},
  };
  return cli::parse_and_run(app, commands, argc, argv);
}
