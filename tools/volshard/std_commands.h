#pragma once
// The subcommands that need no LibTorch (synth, info): compiled into both the
// light `volshard` and `volshard-torch`. Each adds its flags to the app, bound
// to options it owns, and returns what runs it once the command line is
// parsed: the process exit status (0 ok, 1 a file could not be read or
// written, 2 bad arguments). Exceptions are mapped to exit statuses by main():
// std::invalid_argument 2, anything else 1.

#include <CLI/CLI.hpp>

#include <functional>

namespace volshard::cli {

using Run = std::function<int()>;

Run add_synth_command(CLI::App& app);
Run add_info_command(CLI::App& app);

/// Parses argv into `app` and runs the chosen command, mapping exceptions to
/// exit statuses (CLI11 errors and std::invalid_argument 2, others 1).
int parse_and_run(CLI::App& app, const std::vector<std::pair<std::string, Run>>& commands, int argc,
                  char** argv);

}  // namespace volshard::cli
