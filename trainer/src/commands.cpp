#include "volshard/trainer/commands.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>

#include "volshard/trainer/launch.h"
#include "volshard/trainer/rendezvous.h"

namespace volshard {
namespace {

std::atomic<int> g_stop_signal{0};
void request_stop(int sig) { g_stop_signal.store(sig); }

}  // namespace

int train_command(const TrainOptions& options, const TrainLaunch& launch,
                  const std::vector<std::string>& argv) {
  const bool launched = launched_by_launcher();
  if ((launch.nproc_per_node > 1 || launch.nnodes > 1) && !launched && launch.init_method.empty()) {
    LaunchOptions lo;
    lo.nproc_per_node = launch.nproc_per_node;
    lo.nnodes = launch.nnodes;
    lo.node_rank = launch.node_rank;
    lo.master_addr = launch.master_addr;
    lo.master_port = launch.master_port;
    lo.command = argv;
    lo.grace_seconds = std::min(options.timeout_s + 5, 60.0);
    lo.validate();
    check_training_config(options, lo.nnodes * lo.nproc_per_node);  // before any worker starts
    return run_workers(lo);
  }

  Rendezvous r;
  if (launched || !launch.init_method.empty()) {
    r = parse_rendezvous(launch.init_method.empty() ? "env://" : launch.init_method, launch.rank,
                         launch.world_size);
  } else {
    r.source = "single process";
  }
  if (!launched) check_training_config(options, r.world_size);
  TrainOptions o = options;
  o.local_world_size = r.local_world_size;

  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  CommOptions co;
  co.backend = o.backend == "nccl" ? Backend::kNccl : Backend::kGloo;
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  try {
    Communicator comm(r, co);
    const TrainSummary s = train(o, comm, [] { return g_stop_signal.load() != 0; });
    if (r.rank == 0) {
      const std::filesystem::path run(o.out_dir);
      std::cout << (s.interrupted ? "stopped" : "done") << " after " << s.global_step
                << " steps: " << (run / "model.pt").string() << ", "
                << (run / "checkpoint.pt").string() << ", " << (run / "metrics.jsonl").string()
                << ", " << (run / "curves.png").string() << "\n";
      if (s.interrupted) std::cout << "resume with: --resume " << o.out_dir << "\n";
    }
    return s.interrupted && g_stop_signal.load() != 0 ? 128 + g_stop_signal.load() : 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << "volshard train: rank " << r.rank << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "volshard train: rank " << r.rank << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace volshard
