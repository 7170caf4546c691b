#pragma once
// The subcommands of `volshard`, one file each (<verb>_command.cpp). Each
// adds its flags to the app, bound to options it owns, and returns what runs
// it once the command line is parsed: the process exit status (0 ok, 1 a file
// could not be read or written, 2 bad arguments). Exceptions are mapped to
// exit statuses by main(): std::invalid_argument 2, anything else 1.

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "volshard/trainer/options.h"

namespace volshard::cli {

using Run = std::function<int()>;

Run add_synth_command(CLI::App& app);
Run add_info_command(CLI::App& app);
Run add_preview_command(CLI::App& app);
/// `argv`: the whole command line, which a launcher starts its workers with.
Run add_train_command(CLI::App& app, const std::vector<std::string>& argv);
Run add_repro_command(CLI::App& app);
Run add_predict_command(CLI::App& app);

/// The flags of every TrainOptions field (the table in options.h), with
/// `--config FILE.json` (keys as in RUN/config.json) giving their defaults:
/// flags on the command line override the file; an unknown key is an error.
void add_train_flags(CLI::App* cmd, TrainOptions& options);
/// The network's flags (--channels, --strides, ...), and `--config` taking
/// only those keys from a RUN/config.json (its other keys are ignored).
void add_model_flags(CLI::App* cmd, UNetOptions& model);

/// An option taking an enum's names (enum_names in options.h), any case.
template <class T>
void add_enum_option(CLI::App* cmd, const std::string& flag, T& value, const std::string& help);

}  // namespace volshard::cli
