// volshard info: what a NIfTI file holds.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "std_commands.h"
#include "verbs.h"
#include "volshard/core/error.h"
#include "volshard/volume_io/volume_info.h"

namespace volshard::cli {

Run add_info_command(CLI::App& app) {
  struct State {
    std::vector<std::string> files;
    bool json = false;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("info", verb_summary("info"));
  cmd->footer(
      "\nExamples:\n  volshard info data/img0.nii.gz data/seg0.nii.gz\n"
      "  volshard info --json data/*.nii.gz");
  cmd->add_option("files", s->files, ".nii or .nii.gz files")->required();
  cmd->add_flag("--json", s->json, "one JSON object per line");
  return [s] {
    int status = 0;
    for (const auto& f : s->files) {
      try {
        const VolumeInfo info = describe_volume(f);
        std::cout << (s->json ? to_json(info) + "\n" : to_text(info));
      } catch (const std::exception& e) {  // report and go on with the other files
        std::cerr << "volshard info: " << printable_lines(e.what()) << "\n";
        status = 1;
      }
    }
    return status;
  };
}

}  // namespace volshard::cli
