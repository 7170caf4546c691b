#include "verbs.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "volshard/core/error.h"
#include "volshard/core/nearest_name.h"

namespace volshard::cli {

const std::vector<Verb>& verbs() {
  static const std::vector<Verb> table{
      {"synth", "write synthetic volumes: MONAI's spheres or a Decathlon-style CT/MRI folder",
       false},
      {"info", "shape, dtype, spacing, affine and value range of NIfTI files", false},
      {"preview", "PNG of augmented crops (axial and coronal slices, label outlined)", true},
      {"train", "train MONAI's 3D UNet or SegResNet data-parallel (Gloo on CPU, NCCL on GPU)",
       true},
      {"repro", "check reproducibility on your configuration at small scale (verdict table)", true},
      {"diff", "where two training runs part: the first step and what differs, and why", true},
      {"predict", "segment a volume with a trained network; writes NIfTI with the input's affine",
       true},
      {"prepare", "write a configuration's deterministic prefix of an image (and label) as NIfTI",
       true},
      {"audit",
       "check a PyTorch/MONAI DDP script's data plan on this machine (python -m volshard.audit)",
       false, true},
  };
  return table;
}

std::string verb_summary(const std::string& name) {
  for (const Verb& v : verbs())
    if (name == v.name) return v.summary;
  throw std::logic_error("verb_summary: no subcommand '" + name + "'");
}

std::string unknown_verb_message(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  const std::string word = argv[1];
  std::vector<std::string> verb_names;
  for (const Verb& v : verbs()) {
    if (word == v.name) return "";
    verb_names.push_back(v.name);
  }
  std::string message = "unknown command '" + word + "'";
  const std::string nearest = nearest_name(word, verb_names, std::max<size_t>(2, word.size() / 3));
  if (!nearest.empty()) message += "; did you mean '" + nearest + "'?";
  std::string names;
  for (const Verb& v : verbs()) names += std::string(names.empty() ? "" : ", ") + v.name;
  return message + " (commands: " + names + ")";
}

const char* const kTopFooter =
    "\nRun 'volshard COMMAND --help' for a command's flags and examples.\n"
    "Exit status: 0 ok, 1 a file could not be read or written, 2 bad arguments.";

std::vector<char*> take_local_rank_flag(int argc, char** argv) {
  std::vector<char*> kept;
  std::string value, flag;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    bool taken = false;
    for (const std::string name : {"--local-rank", "--local_rank"}) {
      if (a.rfind(name + "=", 0) == 0) {
        value = a.substr(name.size() + 1);
        taken = true;
      } else if (a == name && i + 1 < argc) {
        value = argv[++i];
        taken = true;
      }
      if (taken) {
        flag = name;
        break;
      }
    }
    if (!taken) kept.push_back(argv[i]);
  }
  kept.push_back(nullptr);
  if (flag.empty()) return kept;
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
      value.size() > 7)
    throw std::invalid_argument(flag + "=" + value + " must be a non-negative integer");
  const char* env = std::getenv("LOCAL_RANK");
  if (env != nullptr && *env != '\0' && value != env)
    throw std::invalid_argument(flag + "=" + value + " but LOCAL_RANK=" + env +
                                ": the launcher gave two local ranks");
  ::setenv("LOCAL_RANK", value.c_str(), 1);
  return kept;
}

bool strip_local_rank_flag(int& argc, char**& argv, std::vector<char*>& storage) {
  try {
    storage = take_local_rank_flag(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "volshard: " << printable_lines(e.what()) << "\n";
    return false;
  }
  argc = static_cast<int>(storage.size()) - 1;
  argv = storage.data();
  return true;
}

}  // namespace volshard::cli
