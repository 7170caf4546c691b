// sampler-inspect: dump and verify the per-rank indices of a distributed sampler.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "volshard/core/nearest_name.h"
#include "volshard/inspect/inspect.h"
#include "volshard/inspect/state_file.h"

namespace {

constexpr const char* kExamples = R"(
Examples:
  sampler-inspect --size 21 --world-size 2 --epochs 0:2 --batch-size 5 --verify
  sampler-inspect --size 10 --world-size 4 --seed 0 --epoch 1 --format json
  sampler-inspect --size 5 --world-size 2 --no-shuffle --mode uneven --format csv
  sampler-inspect --size 100000000 --world-size 8 --rank 3 --format summary
  sampler-inspect --size 40 --world-size 4 --epochs 0:5 --png shards.png
  sampler-inspect --state ckpt/sampler.json --resume-world-size 2 --verify
  sampler-inspect --state run/checkpoint.pt --resume-world-size 1
  sampler-inspect --size 12 --world-size 2 --seeds

A state file is what DistributedSampler::state() saves (a volshard train
checkpoint.pt holds one, and is read as well):
  {"version":1,"seed":0,"epoch":3,"mode":"pad","shuffle":true,"randperm":"torch2",
   "dataset_size":21,"world_size":2,"consumed":10}

Modes: pad (PyTorch drop_last=False, MONAI even_divisible=True), drop_last
(PyTorch drop_last=True), uneven (MONAI even_divisible=False).
Summary fingerprints are FNV-1a 64 over each index as 8 little-endian bytes.
Exit status: 0 ok, 1 a --verify check failed, 2 bad arguments.
)";

void require_at_least(const char* flag, int64_t value, int64_t least) {
  if (value < least) {
    throw std::invalid_argument(std::string(flag) + "=" + std::to_string(value) +
                                " must be >= " + std::to_string(least));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Dump and verify the per-rank indices of a PyTorch-exact DistributedSampler."};
  app.footer(kExamples);
  volshard::inspect::InspectOptions o;
  int64_t rank = -1;
  int64_t epoch = 0;
  std::string epochs, mode = "pad", format = "table", compat = "torch2", state_path;
  bool no_shuffle = false;
  int64_t resume_world_size = 0;

  auto* size_opt =
      app.add_option("--size", o.sampler.dataset_size, "dataset size n (required unless --state)");
  auto* world_opt = app.add_option("--world-size", o.sampler.num_replicas,
                                   "number of ranks W (required unless --state)");
  app.add_option("--rank", rank, "show only this rank, in [0, W)");
  app.add_option("--seed", o.sampler.seed,
                 "base seed (uint64); epoch e shuffles with (seed + e) mod 2^32");
  auto* epoch_opt = app.add_option("--epoch", epoch, "one epoch (default 0)");
  auto* epochs_opt = app.add_option("--epochs", epochs, "inclusive epoch range A:B");
  epoch_opt->excludes(epochs_opt);
  auto* mode_opt = app.add_option("--mode", mode, "pad | drop_last | uneven")
                       ->check(CLI::IsMember({"pad", "drop_last", "uneven"}));
  auto* no_shuffle_opt =
      app.add_flag("--no-shuffle", no_shuffle, "keep dataset order, as shuffle=False");
  auto* batch_opt = app.add_option("--batch-size", o.batch_size, "show each rank's batches");
  app.add_flag("--drop-last-batch", o.drop_last_batch, "drop each rank's last short batch")
      ->needs(batch_opt);
  app.add_option("--format", format, "table | json | csv | summary")
      ->check(CLI::IsMember({"table", "json", "csv", "summary"}));
  app.add_flag("--verify", o.verify, "check each epoch's shards; exit 1 if a check fails");
  auto* compat_opt =
      app.add_option("--torch-compat", compat,
                     "randperm of torch2 (default) or torch1; differ only for n >= 214748364")
          ->check(CLI::IsMember({"torch2", "torch1"}));
  auto* state_opt = app.add_option("--state", state_path,
                                   "show what each rank reads next from a saved sampler state "
                                   "(its JSON, or a run's checkpoint.pt)");
  for (auto* from_state :
       {size_opt, world_opt, epoch_opt, epochs_opt, mode_opt, no_shuffle_opt, compat_opt}) {
    state_opt->excludes(from_state);
  }
  app.add_option("--resume-world-size", resume_world_size,
                 "with --state: re-split the rest of the epoch over W' ranks")
      ->needs(state_opt);
  app.add_flag("--seeds", o.seeds, "print the derived per-rank and per-sample seeds");
  app.add_option("--png", o.png_path,
                 "also draw the assignment (one row per epoch, one cell per sample) as a PNG");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    // An unknown flag is named with the nearest one, as volshard's commands name it.
    for (const std::string& extra : app.remaining()) {
      if (extra.rfind("--", 0) != 0) continue;
      std::vector<std::string> known;
      for (const CLI::Option* option : app.get_options())
        for (const std::string& name : option->get_lnames()) known.push_back("--" + name);
      std::cerr << "sampler-inspect: " << volshard::unknown_flag_message(extra, known)
                << "\nRun with --help for usage.\n";
      return 2;
    }
    std::cerr << "sampler-inspect: " << e.what() << "\nRun with --help for usage.\n";
    return 2;
  }

  try {
    if (!state_path.empty()) {
      std::ifstream in(state_path);
      if (!in) throw std::invalid_argument("--state=" + state_path + ": cannot open the file");
      std::ostringstream text;
      text << in.rdbuf();
      const volshard::SamplerState state =
          volshard::inspect::read_sampler_state(text.str(), "--state=" + state_path);
      if (*app.get_option("--resume-world-size"))
        require_at_least("--resume-world-size", resume_world_size, 1);
      const auto from_state = volshard::inspect::options_from_state(state, resume_world_size);
      o.sampler = from_state.sampler;
      o.resume = from_state.resume;
      o.epochs = from_state.epochs;
    } else if (!*size_opt || !*world_opt) {
      throw std::invalid_argument(std::string(*size_opt ? "--world-size" : "--size") +
                                  " is required (or --state FILE)");
    }
    require_at_least("--size", o.sampler.dataset_size, 0);
    require_at_least("--world-size", o.sampler.num_replicas, 1);
    require_at_least("--epoch", epoch, 0);
    if (*batch_opt) require_at_least("--batch-size", o.batch_size, 1);
    o.format = volshard::inspect::parse_format(format);
    if (!o.resume) {
      o.sampler.shuffle = !no_shuffle;
      o.sampler.mode = volshard::parse_partition_mode(mode);
      o.sampler.randperm = volshard::parse_randperm_compat(compat);
      o.epochs = epochs.empty() ? volshard::inspect::EpochRange{epoch, epoch}
                                : volshard::inspect::parse_epoch_range(epochs);
    }
    if (rank != -1) {
      if (rank < 0 || rank >= o.sampler.num_replicas) {
        throw std::invalid_argument(
            "--rank=" + std::to_string(rank) +
            " must be in [0, --world-size=" + std::to_string(o.sampler.num_replicas) + ")");
      }
      o.rank = rank;
    }
    return volshard::inspect::run(o, std::cout, std::cerr);
  } catch (const std::invalid_argument& e) {
    std::cerr << "sampler-inspect: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "sampler-inspect: error: " << e.what() << "\n";
    return 1;
  }
}
