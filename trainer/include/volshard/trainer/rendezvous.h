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
  /// torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True): the launcher
  /// already serves the TCP store at host:port, every rank is a client, and
  /// keys go under store_prefix ("/worker/attempt_<TORCHELASTIC_RESTART_COUNT>").
  bool launcher_hosts_store = false;
  std::string store_prefix;

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
/// --nproc-per-node`). Not when PET_NPROC_PER_NODE asks this process to be
/// the launcher (pet_launch).
bool launched_by_launcher(const EnvLookup& env = process_environment());

/// torchrun's flags as the PET_* variables that TorchX and Kubeflow's
/// PyTorchJob set for it: when PET_NPROC_PER_NODE is set and GROUP_RANK is not
/// (a worker of torchrun or of `volshard train` has GROUP_RANK), `volshard
/// train` is that launcher: nproc_per_node from PET_NPROC_PER_NODE, nnodes
/// PET_NNODES, node_rank PET_NODE_RANK (else RANK, the pod's index), master
/// PET_MASTER_ADDR/PET_MASTER_PORT (else MASTER_ADDR/MASTER_PORT); -1 and ""
/// for what is unset. Throws std::invalid_argument naming a malformed
/// variable (an elastic range such as PET_NNODES=1:4 is torchrun's alone).
struct PetLaunch {
  bool present = false;
  int64_t nproc_per_node = -1, nnodes = -1, node_rank = -1;
  std::string master_addr;
  int master_port = -1;
};
PetLaunch pet_launch(const EnvLookup& env = process_environment());

/// The address of this host's interface that routes to host:port (a UDP
/// socket connected there, which sends nothing, and getsockname): where Gloo
/// should listen so that peers on that network reach it. "" when the host
/// does not resolve or no route leads there.
std::string local_address_towards(const std::string& host, int port);

/// A SLURM job that was requeued (SLURM_RESTART_COUNT >= 1, as after
/// `scontrol requeue` on the SIGUSR1 warning) resumes its run: the folder to
/// resume when `out_dir` holds a checkpoint.pt and neither --resume nor
/// --overwrite was given, else "".
std::string requeued_run(const std::string& out_dir, bool resume_given, bool overwrite,
                         const EnvLookup& env = process_environment());

}  // namespace volshard
