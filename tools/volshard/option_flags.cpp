// CLI11 flags from the options tables, and RUN/config.json as CLI11's config
// file, so that flags given on the command line override the file's values.
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "commands.h"

namespace volshard::cli {
namespace {

template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

}  // namespace

template <class T>
void add_enum_option(CLI::App* cmd, const std::string& flag, T& value, const std::string& help) {
  std::map<std::string, T> names;
  std::string choices;
  for (const auto& [name, v] : enum_names(T{})) {
    names.emplace(name, v);
    choices += (choices.empty() ? "" : "|") + name;
  }
  cmd->add_option(flag, value, help)
      ->transform(CLI::CheckedTransformer(names, CLI::ignore_case).description(""))
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
      const std::string names = value ? f.flag() + ",!--no-" + f.flag().substr(2) : f.flag();
      cmd->add_flag(names, value, std::string(f.help) + (value ? " (default: on)" : ""));
    } else if constexpr (std::is_enum_v<T>) {
      add_enum_option(cmd, f.flag(), value, f.help);
    } else if constexpr (IsVector<T>::value) {
      cmd->add_option(f.flag(), value, f.help)->delimiter(',')->capture_default_str();
    } else {
      cmd->add_option(f.flag(), value, f.help)->capture_default_str();
    }
  }
};

// The keys of a table (JSON keys, as in RUN/config.json).
struct CollectKeys {
  std::set<std::string>* keys;
  template <class T>
  void operator()(const Field& f, const T&) const {
    if (f.in_json) keys->insert(f.key);
  }
};

// A JSON object as CLI11 config items: key "batch_size" is flag
// "--batch-size". Keys outside `accept` are an error, or skipped when
// `ignore_others` (predict reads only the network's keys of a run's config).
class JsonConfig : public CLI::Config {
 public:
  JsonConfig(std::set<std::string> accept, bool ignore_others)
      : accept_(std::move(accept)), ignore_others_(ignore_others) {}

  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }

  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(std::string("--config: not valid JSON (") + e.what() + ")");
    }
    if (!j.is_object()) throw std::invalid_argument("--config: must hold a JSON object");
    std::vector<CLI::ConfigItem> out;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!accept_.count(it.key())) {
        if (ignore_others_) continue;
        throw std::invalid_argument("--config: unknown key '" + it.key() +
                                    "' (keys are the flags' names with '_', as in RUN/config.json)");
      }
      CLI::ConfigItem item;
      item.name = it.key();
      for (char& c : item.name)
        if (c == '_') c = '-';
      const auto text = [](const nlohmann::json& v) {
        return v.is_string() ? v.get<std::string>() : v.dump();
      };
      if (it->is_array()) {
        for (const auto& v : *it) item.inputs.push_back(text(v));
      } else {
        item.inputs.push_back(text(*it));
      }
      out.push_back(std::move(item));
    }
    return out;
  }

 private:
  std::set<std::string> accept_;
  bool ignore_others_;
};

void add_config(CLI::App* cmd, std::set<std::string> keys, bool ignore_others, const char* help) {
  cmd->set_config("--config", "", help);
  cmd->config_formatter(std::make_shared<JsonConfig>(std::move(keys), ignore_others));
}

}  // namespace

void add_train_flags(CLI::App* cmd, TrainOptions& options) {
  TrainOptions::for_each_field(options, AddFlag{cmd});
  std::set<std::string> keys;
  TrainOptions::for_each_field(options, CollectKeys{&keys});
  add_config(cmd, std::move(keys), false,
             "JSON of these options (keys as in RUN/config.json); flags override it");
}

void add_model_flags(CLI::App* cmd, UNetOptions& model) {
  for_each_model_field(model, AddFlag{cmd});
  std::set<std::string> keys;
  for_each_model_field(model, CollectKeys{&keys});
  add_config(cmd, std::move(keys), true,
             "RUN/config.json: the network's keys (channels, strides, ...); flags override it");
}

}  // namespace volshard::cli
