#pragma once
// The subcommands of `volshard`, named once for both executables: the light
// `volshard` (std only: --help, synth, info) runs what needs no LibTorch, hands
// the Python module's verbs (audit) to Python and the others to
// `volshard-torch` beside it, which has them all.

#include <string>
#include <vector>

namespace volshard::cli {

struct Verb {
  const char* name;
  const char* summary;     ///< the line `volshard --help` shows
  bool needs_torch;        ///< run by volshard-torch
  bool in_python = false;  ///< run by the Python module: python -m volshard.<name> (python_verb.h)
};

/// In the order `volshard --help` lists them.
const std::vector<Verb>& verbs();
/// The summary of `name` (a name in verbs()).
std::string verb_summary(const std::string& name);

/// The first argument when it names no subcommand (and is not an option):
/// "unknown command 'trian'; did you mean 'train'?" (the nearest name by edit
/// distance, if any is close). Empty when argv[1] is a subcommand, an option or
/// absent.
std::string unknown_verb_message(int argc, char** argv);

/// A script under `python -m torch.distributed.launch` that hands its
/// arguments on runs `volshard --local-rank=N train ...` (older torch:
/// --local_rank=N): the flag
/// is taken out of argv wherever it stands (also as "--local-rank N"), and
/// LOCAL_RANK set from it, or checked against it when the launcher set both.
/// Returns the remaining arguments (argv[0] first, then a nullptr) or throws
/// std::invalid_argument naming the flag and the variable.
std::vector<char*> take_local_rank_flag(int argc, char** argv);
/// take_local_rank_flag for a main(): afterwards argc and argv describe
/// `storage`; false, with the message on stderr, for a malformed flag.
bool strip_local_rank_flag(int& argc, char**& argv, std::vector<char*>& storage);

/// The top-level help's footer.
extern const char* const kTopFooter;

}  // namespace volshard::cli
