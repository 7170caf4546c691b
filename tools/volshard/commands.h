#pragma once
// The subcommands of `volshard-torch`, one file each (<verb>_command.cpp),
// as std_commands.h describes them; these need LibTorch.

#include <CLI/CLI.hpp>

#include <set>
#include <string>
#include <vector>

#include "std_commands.h"
#include "volshard/datasets/preview.h"
#include "volshard/trainer/options.h"

namespace volshard::cli {

Run add_preview_command(CLI::App& app);
/// `argv`: the whole command line, which a launcher starts its workers with.
Run add_train_command(CLI::App& app, const std::vector<std::string>& argv);
Run add_repro_command(CLI::App& app);
Run add_diff_command(CLI::App& app);
Run add_predict_command(CLI::App& app);
Run add_prepare_command(CLI::App& app);

/// The flags of every TrainOptions field (the table in options.h), with
/// `--config FILE.json` (keys as in RUN/config.json) giving their defaults:
/// flags on the command line override the file; an unknown key is an error.
void add_train_flags(CLI::App* cmd, TrainOptions& options);
/// add_train_flags without the options repro sets for each of its runs
/// (--resume, --max-steps, --trace-samples, ...); a config's values for them
/// are ignored.
void add_repro_flags(CLI::App* cmd, TrainOptions& options);
/// predict's network, activation and prefix flags, and --config (a run's config.json; other keys
/// ignored).
void add_predict_flags(CLI::App* cmd, PredictOptions& options);
/// preview's flags (its own table, for_each_preview_field, and the whole
/// pipeline's: for_each_feed_field, the network's num_classes aside), and
/// --config (a training config's pipeline keys, data and seed; its other
/// training keys ignored).
void add_preview_flags(CLI::App* cmd, PreviewOptions& options);
/// The deterministic prefix's flags, and --config (other keys ignored).
void add_prefix_flags(CLI::App* cmd, PrefixOptions& prefix);

/// An option taking an enum's names (enum_names in options.h), any case.
template <class T>
void add_enum_option(CLI::App* cmd, const std::string& flag, T& value, const std::string& help);

}  // namespace volshard::cli
