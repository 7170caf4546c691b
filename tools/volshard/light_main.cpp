// volshard: the command users type. It runs --help, synth and info itself,
// with the standard library only, so that they start in milliseconds; train,
// predict, preview and repro need LibTorch (about 0.8 s to load), so it
// replaces itself with `volshard-torch` from its own folder, arguments
// unchanged; audit is the Python module's (python -m volshard.audit).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "python_verb.h"
#include "std_commands.h"
#include "verbs.h"

namespace {

// volshard-torch beside this executable (/proc/self/exe, so that a symlink
// or PATH lookup finds the real folder).
int exec_torch_binary(char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string heavy =
      ((ec ? std::filesystem::path(argv[0]) : self).parent_path() / "volshard-torch").string();
  ::execv(heavy.c_str(), argv);
  std::cerr << "volshard: '" << argv[1] << "' runs " << heavy
            << ", which could not be started: " << std::strerror(errno)
            << " (it is built only with LibTorch)\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = volshard::cli;
  // Before --local-rank is taken out: every argument after the verb is the Python verb's (a
  // script's own).
  if (argc > 1) {
    for (const cli::Verb& v : cli::verbs())
      if (v.in_python && std::strcmp(argv[1], v.name) == 0)
        return cli::exec_python_verb(v.name, argc, argv);
  }
  std::vector<char*> args;  // torch.distributed.launch's --local-rank=N taken out
  if (!cli::strip_local_rank_flag(argc, argv, args)) return 2;
  if (argc > 1) {
    for (const cli::Verb& v : cli::verbs())
      if (v.needs_torch && std::strcmp(argv[1], v.name) == 0) return exec_torch_binary(argv);
  }
  CLI::App app{"volshard: deterministic data pipelines for 3D segmentation", "volshard"};
  app.require_subcommand(1);
  app.footer(cli::kTopFooter);
  std::vector<std::pair<std::string, cli::Run>> commands{
      {"synth", cli::add_synth_command(app)},
      {"info", cli::add_info_command(app)},
  };
  // Listed in --help (in verbs() order, after these two); never parsed here.
  for (const cli::Verb& v : cli::verbs())
    if (v.needs_torch || v.in_python) app.add_subcommand(v.name, v.summary);
  return cli::parse_and_run(app, commands, argc, argv);
}
