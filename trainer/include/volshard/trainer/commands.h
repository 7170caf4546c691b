#pragma once
// What `volshard train` and `volshard predict` do, as library calls: main()
// only parses flags.

#include <cstdint>
#include <string>
#include <vector>

#include "volshard/trainer/train.h"

namespace volshard {

struct TrainLaunch {
  int64_t nproc_per_node = 1;  ///< > 1: start that many local workers (like mp.spawn)
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  ///< 0: a free port
  std::string
      init_method;    ///< env:// | tcp://host:port | file:///path; empty: env:// when launched
  int64_t rank = -1;  ///< with tcp:// or file://
  int64_t world_size = -1;
};

/// Launcher or worker, decided as torchrun users expect: with
/// --nproc-per-node > 1 (or --nnodes > 1) and no RANK in the environment it
/// checks the configuration, starts the workers and waits; under torchrun or
/// srun (RANK or SLURM_PROCID set), or with an init method, it is one rank;
/// otherwise a single process. SIGINT/SIGTERM stop after the current step with
/// a checkpoint. Returns the process exit status; errors go to stderr as one
/// line naming the rank.
int train_command(const TrainOptions& options, const TrainLaunch& launch,
                  const std::vector<std::string>& argv);

}  // namespace volshard
