// CLI11 flags from the options tables, and RUN/config.json as their defaults:
// flags given on the command line override the file's values.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <type_traits>

#include "volshard/core/file_io.h"
#include "volshard/core/log.h"
#include "volshard/core/nearest_name.h"
#include "volshard/datasets/field_json.h"

#include "commands.h"

namespace volshard::cli {
template <class T>
void add_enum_option(CLI::App* cmd, const std::string& flag, T& value, const std::string& help) {
  std::vector<std::string> names;
  std::string choices;
  for (const auto& [name, v] : enum_names(T{})) {
    names.push_back(name);
    choices += (choices.empty() ? "" : "|") + name;
  }
  // A name (any case) to the enum's number, which CLI11 assigns; anything else
  // named with the choices and the nearest, as every other value is.
  const auto to_number = [names](std::string& text) -> std::string {
    const std::string lower = ascii_lower(text);
    for (const auto& [name, v] : enum_names(T{})) {
      if (name == lower) {
        text = std::to_string(static_cast<int>(v));
        return "";
      }
    }
    return choice_message(text, names);
  };
  cmd->add_option(flag, value, help)
      ->transform(CLI::Validator(to_number, "", ""))
      ->type_name(choices)
      ->default_str(enum_name(value));
}
template void add_enum_option(CLI::App*, const std::string&, PredictOutput&, const std::string&);

namespace {

// One flag per field: "--" + key with '-' for '_', its help, its default.
struct AddFlag {
  CLI::App* cmd;
  template <class T>
  void operator()(const Field& f, T& value) const {
    if constexpr (std::is_same_v<T, bool>) {
      // On by default: --no-<name> turns it off. A flag of its own, out of the
      // help (CLI11 would print "--no-deterministic{false}"), named in --name's.
      cmd->add_flag(
          f.flag(), value,
          std::string(f.help) +
              (value ? " (default: on; --no-" + f.flag().substr(2) + " turns it off)" : ""));
      if (value)
        cmd->add_flag_callback("--no-" + f.flag().substr(2), [&value] { value = false; })
            ->group("");
    } else if constexpr (std::is_enum_v<T>) {
      add_enum_option(cmd, f.flag(), value, f.help);
    } else if constexpr (IsVector<T>::value) {
      cmd->add_option(f.flag(), value, f.help)->delimiter(',')->capture_default_str();
    } else {
      cmd->add_option(f.flag(), value, f.help)->capture_default_str();
    }
  }
};

// A command's flags whose names are not "--" + key (predict's --model is the
// weights file, so the architecture, key "model", is --network there).
using FlagNames = std::map<std::string, std::string>;

std::string flag_of(const std::string& key, const FlagNames& renamed) {
  const auto it = renamed.find(key);
  return it != renamed.end() ? it->second : Field(key.c_str(), "").flag();
}

// AddFlag for a whole-volume command (predict, prepare): training-only
// fields get no flag (a config's values for them are accepted and ignored),
// nor do those the network sets.
struct AddWholeVolumeFlag {
  CLI::App* cmd;
  const FlagNames& renamed;
  template <class T>
  void operator()(const Field& f, T& value) const {
    if (f.training_only || f.set_by_network) return;
    const auto it = renamed.find(f.key);
    if (it == renamed.end()) return AddFlag{cmd}(f, value);
    Field named = f;
    named.flag_name = it->second.c_str();
    AddFlag{cmd}(named, value);
  }
};

// The keys of a table (JSON keys, as in RUN/config.json).
struct CollectKeys {
  std::set<std::string>* keys;
  template <class T>
  void operator()(const Field& f, const T&) const {
    if (f.in_json && !f.set_by_network) keys->insert(f.key);
  }
};

// Reads a parsed config into the command's options: its tables' fields that
// `take` accepts, through fields_from_json (datasets/field_json.h), the one
// reader of configs/*.json, RUN/config.json and a Python pipeline.
using ReadFields = std::function<void(const nlohmann::json& config, const std::string& who,
                                      const std::function<bool(const Field&)>& take)>;

// A ReadFields over one table (`table(options, visit)`, as for_each_prefix_field walks it).
template <class Options, class Table>
ReadFields read_table(Options& options, Table table) {
  return [&options, table](const nlohmann::json& config, const std::string& who,
                           const std::function<bool(const Field&)>& take) {
    fields_from_json(config, who, options, table, take);
  };
}

// `--config FILE.json` (keys as in RUN/config.json: key "batch_size" is flag
// "--batch-size"): once the command line is parsed, every key whose flag was
// not given there sets its field (`read`). Keys outside `accept` are an
// error, or skipped when `ignore_others` (predict reads only the network's
// keys of a run's config) and they are keys of `volshard train`: a misspelt
// key is an error either way. (CLI11 2.1 reads config files for the top-level
// app only, so a subcommand applies its own.)
void apply_json_config(CLI::App* cmd, const std::string& path, const std::set<std::string>& accept,
                       bool ignore_others, const FlagNames& renamed, const ReadFields& read,
                       const std::set<std::string>& untrusted = {}) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("--config " + path + ": not valid JSON (" + e.what() + ")");
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string("--config: ") + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument("--config " + path + ": must hold a JSON object");
  std::set<std::string> train_keys;
  TrainOptions defaults;
  TrainOptions::for_each_field(defaults, CollectKeys{&train_keys});
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (accept.count(it.key()) || (ignore_others && train_keys.count(it.key()))) continue;
    std::vector<std::string> known(accept.begin(), accept.end());
    const std::string nearest = nearest_key(it.key(), known);
    throw std::invalid_argument(
        "--config " + path + ": unknown key '" + it.key() + "'" +
        (nearest.empty() ? std::string() : " (did you mean '" + nearest + "'?)") +
        "; keys are the flags' names with '_', as in RUN/config.json");
  }
  const auto take = [&](const Field& f) {
    if (!accept.count(f.key)) return false;
    const CLI::Option* option = cmd->get_option_no_throw(flag_of(f.key, renamed));
    if (option == nullptr || option->count() > 0) return false;  // the command line wins
    const nlohmann::json& v = j.at(f.key);
    if (untrusted.count(f.key)) {
      if (f.key != std::string("out") && v.is_string() && !v.get<std::string>().empty())
        warn(path + ": not taken from a run's config: \"" + f.key + "\": " + v.dump() +
             " (a path a run's config names is not trusted; give " + option->get_name() +
             " again to keep it)");
      return false;
    }
    // The file's --data when the command line gave --datalist.
    for (const CLI::Option* other : option->get_excludes())
      if (other->count() > 0) return false;
    // "data": "" beside "datalist": a run's config.json names the one it used.
    return !(v.is_string() && v.get<std::string>().empty() && !option->get_excludes().empty());
  };
  read(j, "--config " + path + ": ", take);
}

// `fallback` (may be empty) names the config to read when --config is not
// given: a run's own (resume's), whose paths of where to write (`out`, the
// trace, the cache) are not taken: a run folder one is handed could name any.
void add_config(CLI::App* cmd, std::set<std::string> keys, bool ignore_others, const char* help,
                ReadFields read, std::function<std::string()> fallback = {},
                FlagNames renamed = {}) {
  auto path = std::make_shared<std::string>();
  cmd->add_option("--config", *path, help)->type_name("FILE.json");
  cmd->final_callback([cmd, path, keys = std::move(keys), ignore_others, read = std::move(read),
                       fallback, renamed = std::move(renamed)] {
    static const std::set<std::string> kRunsOwnPaths{"out", "trace_samples", "cache_dir"};
    if (!path->empty()) {
      apply_json_config(cmd, *path, keys, ignore_others, renamed, read);
    } else if (const std::string run = fallback ? fallback() : std::string(); !run.empty()) {
      apply_json_config(cmd, run, keys, ignore_others, renamed, read, kRunsOwnPaths);
    }
  });
}

// `train --resume RUN` alone: RUN/config.json (beside the checkpoint file
// when --resume names one) as if given with --config.
std::string resumed_run_config(CLI::App* cmd) {
  const CLI::Option* resume = cmd->get_option_no_throw("--resume");
  if (resume == nullptr || resume->count() == 0) return "";
  const std::filesystem::path given(resume->as<std::string>());
  // Said here, before the options its config.json would give are missed.
  if (!std::filesystem::exists(given))
    throw std::invalid_argument("--resume=" + given.string() +
                                ": no such run (no folder or checkpoint file of that name)");
  const std::filesystem::path config = std::filesystem::is_directory(given)
                                           ? given / "config.json"
                                           : given.parent_path() / "config.json";
  return std::filesystem::exists(config) ? config.string() : "";
}

// The options `volshard repro` sets itself for each of its runs: it shows no
// flag for them and ignores a config's values.
const std::set<std::string>& repro_sets_itself() {
  static const std::set<std::string> keys{"resume",    "resume_anyway", "overwrite",
                                          "max_steps", "trace_samples", "checkpoint_every"};
  return keys;
}

// AddFlag for the fields outside `skip`.
struct AddFlagExcept {
  CLI::App* cmd;
  const std::set<std::string>& skip;
  template <class T>
  void operator()(const Field& f, T& value) const {
    if (!skip.count(f.key)) AddFlag{cmd}(f, value);
  }
};

// The keys outside `skip`.
struct CollectKeysExcept {
  std::set<std::string>* keys;
  const std::set<std::string>& skip;
  template <class T>
  void operator()(const Field& f, const T& value) const {
    if (!skip.count(f.key)) CollectKeys{keys}(f, value);
  }
};

void add_training_flags(CLI::App* cmd, TrainOptions& options, const std::set<std::string>& skip) {
  TrainOptions::for_each_field(options, AddFlagExcept{cmd, skip});
  // One of the two is required (TrainOptions::validate, after --config).
  const char* one_of = "Data (one of --data and --datalist is required)";
  cmd->get_option("--data")->excludes("--datalist")->group(one_of);
  cmd->get_option("--datalist")->group(one_of);
  std::set<std::string> keys;
  TrainOptions::for_each_field(options, CollectKeysExcept{&keys, skip});
  ReadFields read = read_table(
      options, [](TrainOptions& o, auto&& visit) { TrainOptions::for_each_field(o, visit); });
  if (skip.empty()) {
    add_config(cmd, std::move(keys), false,
               "JSON of these options (keys as in RUN/config.json; with --resume RUN alone, "
               "RUN/config.json); flags override it",
               std::move(read), [cmd] { return resumed_run_config(cmd); });
  } else {
    add_config(cmd, std::move(keys), true,
               "JSON of these options (keys as in RUN/config.json; the keys of the options "
               "repro sets for its runs are ignored); flags override it",
               std::move(read));
  }
}

}  // namespace

void add_train_flags(CLI::App* cmd, TrainOptions& options) { add_training_flags(cmd, options, {}); }

void add_repro_flags(CLI::App* cmd, TrainOptions& options) {
  add_training_flags(cmd, options, repro_sets_itself());
}

void add_predict_flags(CLI::App* cmd, PredictOptions& o) {
  static const FlagNames kRenamed{{"model", "--network"}};  // --model: the weights file
  PredictOptions::for_each_field(o, AddWholeVolumeFlag{cmd, kRenamed});
  for (const char* flag : {"--model", "--image", "--out"}) cmd->get_option(flag)->required();
  cmd->add_option("--roi-size", o.roi, "--roi's old name, still accepted")
      ->delimiter(',')
      ->group("");
  std::set<std::string> keys;
  PredictOptions::for_each_field(o, CollectKeys{&keys});
  add_config(cmd, std::move(keys), true,
             "RUN/config.json: the network's and the prefix's keys (model, channels, pixdim, ...); "
             "flags override it (the network's kind is --network here)",
             read_table(o, [](PredictOptions& p,
                              auto&& visit) { PredictOptions::for_each_field(p, visit); }),
             {}, kRenamed);
}

namespace {

// AddFlag for a pipeline command (preview): every field but those the network sets.
struct AddFeedFlag {
  CLI::App* cmd;
  template <class T>
  void operator()(const Field& f, T& value) const {
    if (!f.set_by_network) AddFlag{cmd}(f, value);
  }
};

}  // namespace

void add_preview_flags(CLI::App* cmd, PreviewOptions& o) {
  for_each_preview_field(o, AddFlag{cmd});
  for_each_feed_field(o.feed, AddFeedFlag{cmd});
  std::set<std::string> keys;
  for_each_preview_field(o, CollectKeys{&keys});
  for_each_feed_field(o.feed, CollectKeys{&keys});
  add_config(cmd, std::move(keys), true,
             "a training config (configs/spleen.json, RUN/config.json): its pipeline keys (the "
             "prefix, the crop, the augmentation) and its data and seed; flags override it",
             [&o](const nlohmann::json& config, const std::string& who,
                  const std::function<bool(const Field&)>& take) {
               read_table(o, [](PreviewOptions& p, auto&& visit) {
                 for_each_preview_field(p, visit);
               })(config, who, take);
               read_table(o.feed, [](FeedOptions& f, auto&& visit) {
                 for_each_feed_field(f, visit);
               })(config, who, take);
             });
}

void add_prefix_flags(CLI::App* cmd, PrefixOptions& prefix) {
  static const FlagNames kNone;
  for_each_prefix_field(prefix, AddWholeVolumeFlag{cmd, kNone});
  std::set<std::string> keys;
  for_each_prefix_field(prefix, CollectKeys{&keys});
  add_config(
      cmd, std::move(keys), true,
      "a training config (configs/spleen.json, RUN/config.json): its prefix keys "
      "(orientation, pixdim, intensity, ...); flags override it",
      read_table(prefix, [](PrefixOptions& p, auto&& visit) { for_each_prefix_field(p, visit); }));
}

}  // namespace volshard::cli
