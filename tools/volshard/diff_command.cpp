// volshard diff RUN_A RUN_B: where two training runs part, and why.
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "verbs.h"
#include "volshard/trainer/diff.h"

namespace volshard::cli {

Run add_diff_command(CLI::App& app) {
  auto runs = std::make_shared<std::pair<std::string, std::string>>();
  auto* cmd = app.add_subcommand("diff", verb_summary("diff"));
  cmd->footer(
      "\nCompares config.json, fingerprints.jsonl (per step: data order, augmentation, batch "
      "bytes, loss, gradient buckets, weights) and model.pt. Exit 0: the same run; 1: they part "
      "(the first step and part named); 2: bad input.\n\nExample:\n  volshard diff run_a run_b");
  cmd->add_option("RUN_A", runs->first, "a run folder")->required();
  cmd->add_option("RUN_B", runs->second, "another run folder")->required();
  return [runs] {
    const RunDiff d = diff_runs(runs->first, runs->second);
    std::cout << d.report;
    return d.identical ? 0 : 1;
  };
}

}  // namespace volshard::cli
