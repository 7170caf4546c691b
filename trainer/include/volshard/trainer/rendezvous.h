#pragma once
// Where ranks meet, as torch.distributed.init_process_group's init_method:
// env:// (the torchrun contract, or SLURM's), tcp://host:port, file:///path.
// Standard library only.

#include <cstdint>
#include <functional>
#include <string>

namespace volshard {

struct Rendezvous {
  enum class Kind { kTcp, kFile };
  Kind kind = Kind::kTcp;
  std::string host = "127.0.0.1";  ///< kTcp: rank 0 listens here
  int port = 29500;                ///< kTcp
  std::string path;                ///< kFile: a file all ranks can see, not there yet
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;        ///< rank on this machine (LOCAL_RANK)
  int64_t local_world_size = 1;  ///< ranks on this machine (LOCAL_WORLD_SIZE)
  std::string source;            ///< where the values came from, for logs

  /// Throws std::invalid_argument naming the field.
  void validate() const;
};

/// Reads a variable; returns false when unset. Replaceable for tests.
using EnvLookup = std::function<bool(const char* name, std::string* value)>;
EnvLookup process_environment();

/// Parses an init method. env:// reads RANK, WORLD_SIZE, MASTER_ADDR,
/// MASTER_PORT, LOCAL_RANK and LOCAL_WORLD_SIZE (torchrun); when RANK and
/// WORLD_SIZE are unset it falls back to SLURM_PROCID, SLURM_NTASKS,
/// SLURM_LOCALID and SLURM_NTASKS_PER_NODE (srun), with MASTER_ADDR default
/// 127.0.0.1 and MASTER_PORT 29500. tcp://host:port and file:///path take
/// rank and world size from the arguments (or, when those are < 0, from the
/// environment as env:// does). Throws std::invalid_argument naming the
/// variable or the URL part that is missing or malformed.
Rendezvous parse_rendezvous(const std::string& init_method, int64_t rank = -1,
                            int64_t world_size = -1, const EnvLookup& env = process_environment());

/// True when the environment names a rank (RANK or SLURM_PROCID): the process
/// was started by a launcher (torchrun, srun, or `volshard train
/// --nproc-per-node`).
bool launched_by_launcher(const EnvLookup& env = process_environment());

}  // namespace volshard
