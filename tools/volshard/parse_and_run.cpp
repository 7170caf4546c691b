// One mapping from errors to exit statuses for both executables.
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "std_commands.h"
#include "verbs.h"
#include "volshard/core/error.h"
#include "volshard/core/field.h"
#include "volshard/core/nearest_name.h"

namespace volshard::cli {
namespace {

// CLI11 joins the values of a list flag given twice ("--channels 16,32
// --channels 64" is 16,32,64): refused instead, naming both.
void check_list_flags_given_once(const CLI::App& app, int argc, char** argv) {
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const CLI::Option* option : sub->get_options()) {
      if (option->get_delimiter() == '\0') continue;
      std::vector<std::string> given;
      for (int i = 1; i < argc; ++i) {
        const std::string token = argv[i];
        for (const std::string& name : option->get_lnames()) {
          const std::string flag = "--" + name;
          if (token == flag && i + 1 < argc)
            given.push_back(argv[i + 1]);
          else if (token.rfind(flag + "=", 0) == 0)
            given.push_back(token.substr(flag.size() + 1));
        }
      }
      if (given.size() > 1)
        throw std::invalid_argument(sub->get_name() + ": --" + option->get_lnames().front() +
                                    " is given " + std::to_string(given.size()) + " times (" +
                                    given[0] + " and " + given[1] +
                                    "): give it once, its values comma-separated");
    }
  }
}

}  // namespace

int parse_and_run(CLI::App& app, const std::vector<std::pair<std::string, Run>>& commands, int argc,
                  char** argv) {
  const std::string unknown = unknown_verb_message(argc, argv);
  if (!unknown.empty()) {
    std::cerr << "volshard: " << unknown << "\nRun 'volshard --help' for usage.\n";
    return 2;
  }
  app.set_version_flag("--version", std::string("volshard ") + VOLSHARD_VERSION);
  try {
    app.parse(argc, argv);
    check_list_flags_given_once(app, argc, argv);
    for (const auto& [name, run] : commands)
      if (app.got_subcommand(name)) return run();
    return 2;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    // An unknown flag is named with the nearest the command has.
    for (const CLI::App* sub : app.get_subcommands()) {
      for (const std::string& extra : sub->remaining()) {
        if (extra.rfind("--", 0) != 0) continue;
        std::vector<std::string> known;
        for (const CLI::Option* o : sub->get_options())
          for (const std::string& name : o->get_lnames()) known.push_back("--" + name);
        std::cerr << "volshard " << sub->get_name() << ": " << unknown_flag_message(extra, known)
                  << "\nRun 'volshard " << sub->get_name() << " --help' for its flags.\n";
        return 2;
      }
    }
    std::cerr << "volshard: " << printable_lines(e.what()) << "\nRun with --help for usage.\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    // The library names fields by their keys (a config's, Python's); here each is its flag.
    std::cerr << "volshard: " << printable_lines(flag_text(e)) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "volshard: error: " << printable_lines(flag_text(e)) << "\n";
    return 1;
  }
}

}  // namespace volshard::cli
