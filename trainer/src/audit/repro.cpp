#include "volshard/trainer/repro.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "io/archive_io.h"
#include "io/json_lines.h"
#include "volshard/core/field.h"
#include "volshard/core/file_io.h"
#include "volshard/core/progress.h"
#include "volshard/trainer/data_split.h"
#include "volshard/trainer/device.h"
#include "volshard/trainer/diff.h"
#include "volshard/trainer/rank_plan.h"
#include "volshard/volume_io/nifti_header.h"

namespace volshard {

namespace fs = std::filesystem;
using json = nlohmann::json;

void ReproOptions::validate() const {
  if (steps < 2)
    throw FieldError("repro: " + field_ref("steps") + "=" + std::to_string(steps) +
                     " must be >= 2");
  if (nproc_per_node < 2)
    throw FieldError("repro: " + field_ref("nproc_per_node") + "=" +
                     std::to_string(nproc_per_node) + " must be >= 2");
}

namespace {

std::string self_exe() {
  std::error_code ec;
  const auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "volshard" : p.string();
}

// Starts argv (in its own process group, so that the whole launcher tree can
// be killed at once), stdout and stderr to `log`.
pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("repro: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID"})
      ::unsetenv(k);
    if (FILE* f = std::fopen(log.c_str(), "a")) {
      ::dup2(fileno(f), STDOUT_FILENO);
      ::dup2(fileno(f), STDERR_FILENO);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// metrics.jsonl without timing fields.
std::vector<std::string> metrics_of(const std::string& run) {
  std::vector<std::string> out;
  for (const json& j : read_json_lines((fs::path(run) / "metrics.jsonl").string())) {
    json kept;
    for (const char* k : {"type", "epoch", "step", "loss", "lr", "val_dice"})
      if (j.contains(k)) kept[k] = j[k];
    out.push_back(kept.dump());
  }
  return out;
}

int64_t last_step(const std::string& run) {
  int64_t step = 0;
  for (const json& j : read_json_lines((fs::path(run) / "metrics.jsonl").string()))
    if (j.value("type", "") == "step") step = std::max(step, j.value("step", int64_t{0}));
  return step;
}

using TraceKey = std::string;  // epoch, index, patch, crop start, rotation
TraceKey key_of(const json& r) {
  json k = {r["epoch"], r["index"], r["patch"], r["crop_start"], r["rot90_k"]};
  return k.dump();
}

class Runner {
 public:
  // `logs_kept`: the runs' logs outlive repro (--keep, --out), so their
  // paths are worth printing.
  Runner(const ReproOptions& o, fs::path root, bool logs_kept)
      : o_(o), root_(std::move(root)), logs_kept_(logs_kept) {
    binary_ = o.binary.empty() ? self_exe() : o.binary;
    TrainOptions base = o.train;
    base.out_dir.clear();
    base.resume.clear();
    base.trace_samples.clear();
    base.checkpoint_every = 1;
    const std::string text = base.to_json();
    config_ = (root_ / "config.json").string();
    write_file_atomic(config_, {text.data()}, {text.size()});
  }

  std::vector<std::string> argv(const std::string& run, int64_t nproc,
                                const std::vector<std::string>& extra) const {
    std::vector<std::string> a{binary_,
                               "train",
                               "--config",
                               config_,
                               "--out",
                               (root_ / run).string(),
                               "--nproc-per-node",
                               std::to_string(nproc)};
    a.insert(a.end(), extra.begin(), extra.end());
    // A kept --out from an earlier repro holds runs: fresh ones replace them.
    if (std::find(extra.begin(), extra.end(), "--resume") == extra.end())
      a.push_back("--overwrite");
    return a;
  }

  // Runs to completion; throws naming the log when it fails.
  void run(const std::string& run, int64_t nproc, const std::vector<std::string>& extra,
           const std::string& what) const {
    clear_if_fresh(run, extra);
    const std::string log = (root_ / (run + ".log")).string();
    std::cerr << "repro: run " << run << ", " << nproc << " rank" << (nproc > 1 ? "s" : "") << ": "
              << what << (logs_kept_ ? " (log: " + log + ")" : std::string()) << "\n";
    const int code = wait_exit(spawn(argv(run, nproc, extra), log));
    if (code != 0)
      throw std::runtime_error("run " + run + " failed with status " + std::to_string(code) +
                               ": see " + log);
  }

  // Starts a run and SIGKILLs its whole process tree once it logged `step`
  // and wrote a checkpoint.
  // Returns the step it had reached.
  int64_t run_and_kill(const std::string& run, int64_t nproc, const std::vector<std::string>& extra,
                       int64_t step) const {
    std::cerr << "[" << utc_timestamp() << "] repro: run " << run << ", " << nproc << " rank"
              << (nproc > 1 ? "s" : "")
              << ": trains and is SIGKILLed (whole process group) once it logged step " << step
              << "\n";
    clear_if_fresh(run, extra);
    const std::string log = (root_ / (run + ".log")).string();
    const pid_t pid = spawn(argv(run, nproc, extra), log);
    while (true) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) return -1;  // ended before the kill
      // The step's metrics line comes before its checkpoint: a kill between
      // the two at step 1 would leave nothing to resume.
      if (last_step((root_ / run).string()) >= step && fs::exists(root_ / run / "checkpoint.pt"))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(-pid, SIGKILL);
    wait_exit(pid);
    return last_step((root_ / run).string());
  }

  std::string path(const std::string& name) const { return (root_ / name).string(); }

  // A fresh run starts from an empty folder: a kept --out's earlier files
  // (checkpoint.pt, metrics.jsonl) must not stand in for the new run's.
  void clear_if_fresh(const std::string& run, const std::vector<std::string>& extra) const {
    if (std::find(extra.begin(), extra.end(), "--resume") != extra.end()) return;
    std::error_code ec;
    fs::remove_all(root_ / run, ec);
    fs::remove(root_ / (run + ".log"), ec);
  }

 private:
  const ReproOptions& o_;
  fs::path root_;
  bool logs_kept_;
  std::string binary_, config_;
};

constexpr int kChecks = 4;

// volshard diff's verdict on two of the runs, when they part: "; they part at
// step 3 (gradients ...): <cause>".
std::string where_they_part(const Runner& runner, const std::string& a, const std::string& b) {
  try {
    const RunDiff d = diff_runs(runner.path(a), runner.path(b));
    if (d.first_step < 0) return "";
    return "; they part at step " + std::to_string(d.first_step) + " (" + d.first_part +
           "): " + d.cause;
  } catch (const std::exception& e) {
    return std::string("; (diff: ") + e.what() + ")";
  }
}

// Each step's data fingerprints (samples, augmentation, batch bytes) of a
// run, in order.
std::vector<std::string> data_steps(const std::string& run) {
  std::vector<std::string> steps;
  for (const auto& j : read_json_lines((fs::path(run) / "fingerprints.jsonl").string())) {
    if (j.value("type", "") != "step") continue;
    steps.push_back(j.value("indices", "") + j.value("augmentation", "") + j.value("bytes", ""));
  }
  return steps;
}

// Checks (1) and (2): whether runs a and b are bit-identical; where
// `expected` (expected_nondeterminism) says they need not be, a pass with
// that reason when their data matched at every step.
bool judge_identity(const Runner& runner, const std::string& a, const std::string& b,
                    bool identical, const std::string& expected, ReproCheck& c) {
  if (identical || expected.empty()) return identical;
  const auto da = data_steps(runner.path(a));
  if (da.empty() || da != data_steps(runner.path(b))) return false;
  c.expected_difference = expected;
  c.evidence +=
      "; the data, its order and augmentation equal at all " + std::to_string(da.size()) + " steps";
  return true;
}

template <typename F>
ReproCheck check(int number, const std::string& name, F&& body) {
  std::cerr << "[" << utc_timestamp() << "] repro: check " << number << "/" << kChecks << ": "
            << name << "\n";
  ReproCheck c;
  c.name = name;
  try {
    c.passed = body(c.evidence, c);
  } catch (const std::exception& e) {
    c.passed = false;
    c.evidence = std::string("error: ") + e.what();
  }
  return c;
}

}  // namespace

std::string expected_nondeterminism(const TrainOptions& train, const c10::Device& device) {
  if (!device.is_cuda() || train.deterministic) return "";
  return "on CUDA without --deterministic, cuDNN's convolution backward and atomic adds sum in a "
         "varying order, so weights, gradients and loss may differ in their last bits (train "
         "with --deterministic to compare them bit for bit)";
}

std::vector<ReproCheck> run_repro_checks(const ReproOptions& o) {
  o.validate();
  fs::path root = o.train.out_dir;
  bool temporary = false;
  if (root.empty()) {
    char tmpl[] = "/tmp/volshard_repro_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr)
      throw std::runtime_error("repro: cannot create a temporary folder");
    root = tmpl;
    temporary = true;
  }
  fs::create_directories(root);
  TrainOptions checked = o.train;
  checked.out_dir = (root / "a").string();
  checked.overwrite = true;
  check_training_config(checked, o.nproc_per_node);  // one clear error before any run
  const Runner runner(o, root, !temporary || o.keep);
  const int64_t n = o.nproc_per_node, s = o.steps;
  const std::vector<std::string> capped{"--max-steps", std::to_string(s)};
  const std::string expected =
      expected_nondeterminism(o.train, RankPlan::make(checked, 0, n).device);
  std::vector<ReproCheck> checks;

  checks.push_back(check(
      1, "same seed twice: bit-identical model and metrics", [&](std::string& ev, ReproCheck& c) {
        runner.run("a", n, capped, std::to_string(s) + " steps, the reference");
        runner.run("b", n, capped,
                   "the same " + std::to_string(s) + " steps again, to compare with a");
        const bool model =
            read_file(runner.path("a/model.pt")) == read_file(runner.path("b/model.pt"));
        const bool same = diff_runs(runner.path("a"), runner.path("b")).identical;
        const auto ma = metrics_of(runner.path("a")), mb = metrics_of(runner.path("b"));
        ev = std::to_string(s) + " steps on " + std::to_string(n) + " ranks: model.pt " +
             (model ? "equal" : "DIFFERS") + ", " + std::to_string(ma.size()) + " metric lines " +
             (ma == mb ? "equal" : "DIFFER") + where_they_part(runner, "a", "b");
        return !ma.empty() &&
               judge_identity(runner, "a", "b", model && same && ma == mb, expected, c);
      }));

  checks.push_back(check(
      2, "SIGKILL mid-run, resume: bit-identical to uninterrupted",
      [&](std::string& ev, ReproCheck& c) {
        const int64_t reached = runner.run_and_kill("c", n, capped, s / 2);
        auto resume = capped;
        resume.insert(resume.end(), {"--resume", runner.path("c")});
        runner.run("c", n, resume, "resumes c from its last checkpoint, to compare with a");
        const bool model =
            read_file(runner.path("a/model.pt")) == read_file(runner.path("c/model.pt"));
        const bool metrics = metrics_of(runner.path("a")) == metrics_of(runner.path("c"));
        // volshard diff's verdict too: every step's fingerprints, the resumed ones included.
        const bool same = diff_runs(runner.path("a"), runner.path("c")).identical;
        ev = (reached < 0 ? std::string("run ended before the kill")
                          : "killed after step " + std::to_string(reached)) +
             "; model.pt " + (model ? "equal" : "DIFFERS") + ", metrics " +
             (metrics ? "equal" : "DIFFER") + where_they_part(runner, "a", "c");
        return judge_identity(runner, "a", "c", model && metrics && same, expected, c);
      }));

  checks.push_back(
      check(3, "world-size invariance of the augmented data", [&](std::string& ev, ReproCheck&) {
        // The same permutation positions: s steps on n ranks, s * n steps on 1.
        const std::vector<std::string> t1{
            "--trace-samples", runner.path("d1.trace"), "--val-every", "0", "--epochs", "1",
            "--max-steps",     std::to_string(s * n)};
        const std::vector<std::string> tn{
            "--trace-samples", runner.path("dn.trace"), "--val-every", "0", "--epochs", "1",
            "--max-steps",     std::to_string(s)};
        runner.run("d1", 1, t1, std::to_string(s * n) + " steps, tracing every crop fed");
        runner.run("dn", n, tn,
                   std::to_string(s) + " steps, tracing every crop, to compare with d1");
        std::multiset<TraceKey> k1, kn;
        for (const auto& r : read_json_lines(runner.path("d1.trace"))) k1.insert(key_of(r));
        for (const auto& r : read_json_lines(runner.path("dn.trace"))) kn.insert(key_of(r));
        const bool same = k1 == kn;
        const bool same_set =
            std::set<TraceKey>(k1.begin(), k1.end()) == std::set<TraceKey>(kn.begin(), kn.end());
        ev = std::to_string(k1.size()) + " crops at 1 rank, " + std::to_string(kn.size()) + " at " +
             std::to_string(n) + ": " +
             (same       ? "same multiset"
              : same_set ? "same set (padding repeats)"
                         : "DIFFERENT");
        return same || same_set;
      }));

  checks.push_back(check(
      4, "elastic resume, " + std::to_string(n) + " ranks -> 1: no sample skipped or repeated",
      [&](std::string& ev, ReproCheck&) {
        const std::string trace = runner.path("e.trace");
        TrainOptions unvalidated = o.train;  // the runs' --val-every 0: nothing held out
        unvalidated.val_every = 0;
        const int64_t size = training_set_size(unvalidated);
        const int64_t per_rank = (size + n - 1) / n;
        runner.run(
            "e", n,
            {"--trace-samples", trace, "--val-every", "0", "--epochs", "1", "--max-steps", "1"},
            "1 step, tracing, then stops with a checkpoint");
        // Where one step is the whole epoch there is nothing left to resume
        // (train refuses to resume a complete run): the trace is all of it.
        const bool rest = per_rank > o.train.batch_size;
        if (rest)
          runner.run("e", 1,
                     {"--trace-samples", trace, "--val-every", "0", "--epochs", "1", "--resume",
                      runner.path("e")},
                     "resumes e on 1 rank to the end of the epoch, tracing");
        std::map<int64_t, int64_t> seen;
        for (const auto& r : read_json_lines(trace))
          if (r["epoch"] == 0 && r["patch"] == 0) ++seen[r["index"].get<int64_t>()];
        // The first run's step on n ranks takes batch_size positions per rank of
        // the order padded (pad mode: wrapped) to a multiple of n; where that
        // reaches past the end, those repeats are padding. The rest of the
        // epoch runs on 1 rank, which needs none.
        const int64_t taken = std::min(o.train.batch_size, per_rank) * n;
        const int64_t padding = std::max<int64_t>(0, taken - size);
        int64_t missing = 0, repeated = 0;
        for (const auto& [index, count] : seen) repeated += count - 1;
        for (int64_t i = 0; i < size; ++i) missing += seen.count(i) ? 0 : 1;
        ev = std::to_string(size) + " training volumes: " + std::to_string(seen.size()) +
             " seen, " + std::to_string(missing) + " missing, " + std::to_string(repeated) +
             " repeated (" + std::to_string(padding) + " of them padding to a multiple of " +
             std::to_string(n) + " ranks)" +
             (rest ? "" : "; one step was the whole epoch: nothing to resume");
        return missing == 0 && repeated == padding;
      }));

  // A failed check keeps its runs: the logs its evidence names are there.
  const bool failed =
      std::any_of(checks.begin(), checks.end(), [](const ReproCheck& c) { return !c.passed; });
  if (temporary && !o.keep && !failed) {
    std::error_code ec;
    fs::remove_all(root, ec);
  } else {
    std::cerr << "repro: runs and their logs kept in " << root.string()
              << (failed && temporary && !o.keep ? " (a check failed)" : "") << "\n";
  }
  return checks;
}

std::string format_repro_table(const std::vector<ReproCheck>& checks) {
  size_t w = 5;
  for (const auto& c : checks) w = std::max(w, c.name.size());
  std::ostringstream out;
  out << "check" << std::string(w - 5, ' ') << " | result   | evidence\n";
  out << std::string(w, '-') << "-+----------+" << std::string(40, '-') << "\n";
  for (const auto& c : checks) {
    const bool expected = c.passed && !c.expected_difference.empty();
    out << c.name << std::string(w - c.name.size(), ' ') << " | "
        << (expected   ? "expected"
            : c.passed ? "pass    "
                       : "FAIL    ")
        << " | " << c.evidence
        << (expected ? "; weights differ as expected: " + c.expected_difference : "") << "\n";
  }
  return out.str();
}

}  // namespace volshard
