// volshard train: launcher or worker, as torchrun users expect.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "commands.h"
#include "verbs.h"
#include "volshard/core/error.h"
#include "volshard/core/folder_lock.h"
#include "volshard/trainer/data_split.h"
#include "volshard/trainer/launch.h"
#include "volshard/trainer/rendezvous.h"
#include "volshard/trainer/train.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

namespace volshard::cli {
namespace {

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

// `value` = `from` where `from` was set (>= 0).
template <class T, class U>
void set_if_given(T& value, U from) {
  if (from >= 0) value = static_cast<T>(from);
}

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_announce_stop{false};  // rank 0 says what it does with the signal
void request_stop(int sig) {
  if (g_stop_signal.exchange(sig) != 0 || !g_announce_stop.load()) return;
  static const char kInt[] =
      "\nvolshard train: received SIGINT: stopping after this step with a checkpoint\n";
  static const char kTerm[] =
      "\nvolshard train: received SIGTERM: stopping after this step with a checkpoint\n";
  static const char kUsr1[] =
      "\nvolshard train: received SIGUSR1 (SLURM's warning before the time limit): stopping after "
      "this step with a checkpoint; a job requeued with `scontrol requeue` resumes it\n";
  const char* text = sig == SIGINT ? kInt : sig == SIGUSR1 ? kUsr1 : kTerm;
  const size_t size = sig == SIGINT    ? sizeof kInt - 1
                      : sig == SIGUSR1 ? sizeof kUsr1 - 1
                                       : sizeof kTerm - 1;
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, text, size);  // signal-safe
}

// Launcher or worker: with --nproc-per-node > 1 (or --nnodes > 1) and no
// RANK in the environment it checks the configuration, starts the workers and
// waits; under torchrun or srun (RANK or SLURM_PROCID set), or with an init
// method, it is one rank; otherwise a single process. SIGINT, SIGTERM and
// SIGUSR1 (SLURM's warning) stop after the current step with a checkpoint; a
// requeued SLURM job resumes its --out run.
// The run folder, held by one process for the run (FolderLock): the one
// that starts it (this launcher, or a single process), or rank 0 where
// another launcher (torchrun, srun) started the workers; the workers this
// launcher starts find it held for them (kRunHeld in their environment).
constexpr const char* kRunHeld = "VOLSHARD_RUN_FOLDER_HELD";

bool holds_run_folder(const TrainOptions& o, bool launched, const TrainLaunch& launch) {
  if (o.out_dir.empty() || std::getenv(kRunHeld) != nullptr) return false;
  const char* rank = std::getenv("RANK");
  if (launched && (rank == nullptr || std::string(rank) != "0")) return false;
  if (!launched && !launch.init_method.empty() && launch.rank != 0) return false;
  return launched || launch.node_rank == 0;  // node 0's launcher holds it
}

std::optional<FolderLock> hold_run_folder(const TrainOptions& o, bool launched,
                                          const TrainLaunch& launch) {
  if (!holds_run_folder(o, launched, launch)) return std::nullopt;
  std::optional<FolderLock> held(FolderLock::acquire(o.out_dir, "volshard train"));
  ::setenv(kRunHeld, std::to_string(::getpid()).c_str(), 1);  // for the workers started below
  return held;
}

// Each local rank runs its own network, loader and threads: more than 4 a
// core (or one a GPU) only slows a machine down, and a typo (1000) would
// start a thousand processes.
void check_local_ranks(int64_t nproc) {
  const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t gpus = visible_gpus();
  const int64_t most = std::max<int64_t>({8, 4 * cores, gpus});
  if (nproc > most)
    throw std::invalid_argument("launcher: --nproc-per-node=" + std::to_string(nproc) +
                                " on a machine with " + std::to_string(cores) + " cores and " +
                                std::to_string(gpus) + " GPU(s): at most " + std::to_string(most) +
                                " local ranks here (4 a core, one a GPU, or 8)");
}

int train_command(const TrainOptions& given, const TrainLaunch& launch,
                  const std::vector<std::string>& argv) {
  const bool launched = launched_by_launcher();
  TrainOptions options = given;
  options.resume = requeued_run(given.out_dir, !given.resume.empty(), given.overwrite);
  if (options.resume.empty()) {
    options.resume = given.resume;
  } else if (!launched || std::getenv("GROUP_RANK") == nullptr) {  // said once, by the launcher
    std::cerr << "volshard train: a requeued SLURM job (SLURM_RESTART_COUNT set): resuming "
              << options.resume << "\n";
  }
  LaunchOptions lo;
  lo.nproc_per_node = launch.nproc_per_node;
  lo.nnodes = launch.nnodes;
  lo.node_rank = launch.node_rank;
  lo.master_addr = launch.master_addr;
  lo.master_port = launch.master_port;
  lo.command = argv;
  lo.grace_seconds = std::min(options.timeout_s + 5, 60.0);
  // Every launch value is checked whichever path runs (--nproc-per-node 0
  // would otherwise pick the single-process path and run one rank silently);
  // a worker's were checked by its launcher (torchrun's by torchrun).
  if (!launched) lo.validate();
  if (!launched) check_local_ranks(lo.nproc_per_node);
  // A live run in --out is named first; the folder is made and held after the
  // checks (a refused configuration makes nothing), before any worker starts.
  if (holds_run_folder(options, launched, launch)) FolderLock::check_free(options.out_dir);
  std::optional<FolderLock> held;
  const auto hold = [&] {
    held = hold_run_folder(options, launched, launch);
    // How this launcher started the run, for --resume RUN alone.
    if (held && !launched && launch.init_method.empty())
      write_launch_record(options.out_dir, {lo.nproc_per_node, lo.nnodes});
  };
  if ((lo.nproc_per_node > 1 || lo.nnodes > 1) && !launched && launch.init_method.empty()) {
    check_training_config(options, lo.nnodes * lo.nproc_per_node);  // before any worker starts
    TrainOptions first = options;  // the first worker's device, cache device and backend
    first.local_world_size = lo.nproc_per_node;
    (void)RankPlan::make(first, 0, lo.nnodes * lo.nproc_per_node);
    if (lo.master_port != 0 && lo.node_rank == 0)
      check_port_free(lo.master_port);  // and again there
    hold();
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
  hold();
  TrainOptions o = options;
  o.local_world_size = r.local_world_size;
  o.local_rank = r.local_rank;

  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);

  c10::initLogging();  // TORCH_CPP_LOG_LEVEL, as Python's torch reads it (the launcher sets ERROR)
  CommOptions co;
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  g_announce_stop.store(r.rank == 0);
  try {
    const RankPlan plan = RankPlan::make(o, r.rank, r.world_size);
    co.backend = plan.backend;
    Communicator comm(r, co);
    const TrainSummary s = train(o, plan, comm, [] { return g_stop_signal.load() != 0; });
    if (r.rank == 0) {
      const std::filesystem::path run(o.out_dir);
      std::string files;  // those the run wrote (a run stopped early has no curves yet)
      for (const char* name : {"model.pt", "checkpoint.pt", "metrics.jsonl", "curves.png"})
        if (std::filesystem::exists(run / name))
          files += (files.empty() ? "" : ", ") + (run / name).string();
      print_run_line(std::cout, std::string(s.interrupted ? "stopped" : "done") + " after " +
                                    std::to_string(s.global_step) + " steps: " + files);
      if (s.best_epoch >= 0) {
        std::ostringstream best;
        best << "best validation Dice " << s.best_val_dice << " at epoch " << s.best_epoch + 1
             << ": " << (run / "best_model.pt").string();
        print_run_line(std::cout, best.str());
      }
      if (s.interrupted) print_run_line(std::cout, "resume with: --resume " + o.out_dir);
    }
    return s.interrupted && g_stop_signal.load() != 0 ? 128 + g_stop_signal.load() : 0;
  } catch (const std::exception& e) {
    // One line naming the cause: c10's errors without their C++ backtrace;
    // under a launcher it prints the first rank's error last (the others'
    // are the lost rank it left behind).
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    const bool bad_input = dynamic_cast<const std::invalid_argument*>(&e) != nullptr;
    const std::string line =
        "volshard train: rank " + std::to_string(r.rank) + ": " + (bad_input ? "" : "error: ") +
        printable_lines(c10_error ? c10_error->what_without_backtrace() : flag_text(e));
    if (!report_worker_error(line)) print_run_line(std::cerr, line);
    return bad_input ? 2 : 1;
  }
}

}  // namespace

Run add_train_command(CLI::App& app, const std::vector<std::string>& argv) {
  struct State {
    TrainOptions train;
    TrainLaunch launch;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("train", verb_summary("train"));
  cmd->footer(
      "\nExamples:\n"
      "  volshard train --data data --out run --epochs 2 --nproc-per-node 2 --crop 32\n"
      "  volshard train --resume run            # continue a stopped run with its own config.json");
  add_train_flags(cmd, s->train);
  TrainLaunch& l = s->launch;
  cmd->add_option("--nproc-per-node", l.nproc_per_node, "local worker processes to start")
      ->capture_default_str();
  cmd->add_option("--nnodes", l.nnodes, "machines taking part")->capture_default_str();
  cmd->add_option("--node-rank", l.node_rank, "this machine's index")->capture_default_str();
  cmd->add_option("--master-addr", l.master_addr, "rank 0's machine")->capture_default_str();
  cmd->add_option("--master-port", l.master_port, "rank 0's port (0: a free port)")
      ->capture_default_str();
  cmd->add_option("--init-method", l.init_method, "env:// | tcp://host:port | file:///path");
  cmd->add_option("--rank", l.rank, "with --init-method tcp:// or file://");
  cmd->add_option("--world-size", l.world_size, "with --init-method tcp:// or file://");
  // torchrun's flags as TorchX and Kubeflow set them (PET_*), where not given here.
  return [s, argv, cmd] {
    const PetLaunch pet = pet_launch();
    if (pet.present) {
      const auto unset = [cmd](const char* flag) { return cmd->get_option(flag)->count() == 0; };
      if (unset("--nproc-per-node")) set_if_given(s->launch.nproc_per_node, pet.nproc_per_node);
      if (unset("--nnodes")) set_if_given(s->launch.nnodes, pet.nnodes);
      if (unset("--node-rank")) set_if_given(s->launch.node_rank, pet.node_rank);
      if (unset("--master-port")) set_if_given(s->launch.master_port, int64_t{pet.master_port});
      if (unset("--master-addr") && !pet.master_addr.empty())
        s->launch.master_addr = pet.master_addr;
    }
    // --resume RUN writes into RUN (not where its config.json says: a copied
    // run advances the copy), unless --out says otherwise.
    const auto unset = [cmd](const char* flag) { return cmd->get_option(flag)->count() == 0; };
    if (!s->train.resume.empty() && unset("--out")) {
      const std::filesystem::path given(s->train.resume);
      s->train.out_dir =
          (std::filesystem::is_directory(given) ? given : given.parent_path()).string();
    }
    // --resume RUN alone starts the run as it last ran (RUN/launch.json): its world size with it.
    if (!s->train.resume.empty() && unset("--nproc-per-node") && unset("--nnodes") &&
        !pet.present && !launched_by_launcher() && s->launch.init_method.empty()) {
      const std::filesystem::path given(s->train.resume);
      const auto record = read_launch_record(
          (std::filesystem::is_directory(given) ? given : given.parent_path()).string());
      if (record && record->nnodes == 1) s->launch.nproc_per_node = record->nproc_per_node;
    }
    return train_command(s->train, s->launch, argv);
  };
}

}  // namespace volshard::cli
