// One mapping from errors to exit statuses for both executables.
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "std_commands.h"
#include "verbs.h"
#include "volshard/core/nearest_name.h"

namespace volshard::cli {

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

}  // namespace volshard::cli
