// volshard: synthetic data, volume inspection, training and prediction.
// main() only parses the command line; each subcommand is a <verb>_command.cpp.
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "volshard/datasets/loader.h"  // tune_allocator_for_volumes

int main(int argc, char** argv) {
  // Before any thread starts (train's communicator has a heartbeat thread):
  // one malloc arena, large buffers kept (see tune_allocator_for_volumes).
  volshard::tune_allocator_for_volumes();
  namespace cli = volshard::cli;
  CLI::App app{"volshard: deterministic data pipelines for 3D segmentation"};
  app.require_subcommand(1);
  app.footer(
      "\nRun 'volshard COMMAND --help' for a command's flags and examples.\n"
      "Exit status: 0 ok, 1 a file could not be read or written, 2 bad arguments.");
  const std::vector<std::pair<std::string, cli::Run>> commands{
      {"synth", cli::add_synth_command(app)},
      {"info", cli::add_info_command(app)},
      {"preview", cli::add_preview_command(app)},
      {"train", cli::add_train_command(app, std::vector<std::string>(argv, argv + argc))},
      {"repro", cli::add_repro_command(app)},
      {"predict", cli::add_predict_command(app)},
  };
  try {
    app.parse(argc, argv);
    for (const auto& [name, run] : commands)
      if (app.got_subcommand(name)) return run();
    return 2;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "volshard: " << e.what() << "\nRun with --help for usage.\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "volshard: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "volshard: error: " << e.what() << "\n";
    return 1;
  }
}
