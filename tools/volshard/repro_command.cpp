// volshard repro: the reproducibility guarantees checked on a configuration.
#include <iostream>
#include <memory>

#include "commands.h"
#include "verbs.h"
#include "volshard/trainer/repro.h"

namespace volshard::cli {

Run add_repro_command(CLI::App& app) {
  auto o = std::make_shared<ReproOptions>();
  auto* cmd = app.add_subcommand("repro", verb_summary("repro"));
  cmd->footer(
      "\nExample:\n  volshard repro --data data --crop 32 --channels 4,8,16,32 --strides 2,2,2 "
      "--steps 4");
  add_repro_flags(cmd, o->train);
  cmd->add_option("--steps", o->steps, "training steps per run")->capture_default_str();
  cmd->add_option("--nproc-per-node", o->nproc_per_node, "ranks of the distributed runs")
      ->capture_default_str();
  cmd->add_flag("--keep", o->keep, "keep the runs (in --out, or a temporary folder)");
  return [o] {
    const auto checks = run_repro_checks(*o);
    std::cout << format_repro_table(checks);
    for (const auto& c : checks)
      if (!c.passed) return 1;
    return 0;
  };
}

}  // namespace volshard::cli
