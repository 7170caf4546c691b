#pragma once
// Starting N local worker processes, as torch.multiprocessing.spawn / torchrun
// do: each gets the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). POSIX and standard library only.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "volshard/core/file_io.h"

namespace volshard {

struct LaunchOptions {
  int64_t nproc_per_node = 1;  ///< workers on this machine, >= 1
  int64_t nnodes = 1;          ///< machines, >= 1
  int64_t node_rank = 0;       ///< this machine, in [0, nnodes)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;               ///< 0: a free port (single machine only)
  std::vector<std::string> command;  ///< argv of every worker (argv[0]: the program)
  /// After one worker fails, how long the others get to stop by themselves
  /// (they see the lost rank) before they are killed.
  double grace_seconds = 15;
  void validate() const;  ///< throws std::invalid_argument naming the field
};

/// A free TCP port, held until this object goes: bound on every interface
/// with SO_REUSEADDR and not listening, so that no bind to port 0 and no
/// outgoing connection elsewhere is given it, while the rendezvous store
/// (torch's TCPStore binds with SO_REUSEADDR) can still listen on it. A port
/// looked up and let go before the store binds can be taken meanwhile by
/// another process; a store client that then reaches a listener that is not
/// the store waits on it forever (torch 2.11's TCPStore, past its timeout).
class PortReservation {
 public:
  PortReservation();  ///< throws std::runtime_error when no socket can be bound
  int port() const { return port_; }

 private:
  Fd fd_;
  int port_ = 0;
};
/// Throws std::invalid_argument naming the port when something already
/// listens on it (checked by binding it as the store does: a
/// PortReservation's port is free to it).
void check_port_free(int port);

/// Forks and execs the workers, forwards SIGINT, SIGTERM and SIGUSR1 to them (a second
/// signal kills them), and waits. Returns 0 when every worker exited 0; the
/// failing worker's status (or 128 + its signal) when one failed, after the
/// others were given grace_seconds and then killed; 128 + the signal when
/// interrupted. Writes one line to stderr per failed worker, naming its rank,
/// and, last, the first error a worker reported (report_worker_error): the
/// cause, not the lost ranks it left behind. The workers' C++ warnings are at
/// ERROR level (TORCH_CPP_LOG_LEVEL, unless set): c10d's stack traces of a
/// store that went away with its rank say nothing the cause does not.
int run_workers(const LaunchOptions& options);

/// A worker's fatal error, for its launcher: written to VOLSHARD_ERROR_FILE
/// (set by run_workers; the launcher prints the earliest one last) and to
/// TORCHELASTIC_ERROR_FILE (set by torchrun, which shows it as the root
/// cause). Returns false when neither is set or writable: then print it.
bool report_worker_error(const std::string& message);

/// How a run was started, in RUN/launch.json, so that `--resume RUN` alone
/// starts it again the same way (the world size is also in checkpoint.pt).
struct LaunchRecord {
  int64_t nproc_per_node = 1;
  int64_t nnodes = 1;
  int64_t world_size() const { return nproc_per_node * nnodes; }
};
/// Atomic; throws std::runtime_error naming the path.
void write_launch_record(const std::string& run_dir, const LaunchRecord& record);
/// RUN/launch.json's record; nullopt without one (a run from before it, or
/// one started by another launcher) or where it holds no valid record.
std::optional<LaunchRecord> read_launch_record(const std::string& run_dir);

}  // namespace volshard
