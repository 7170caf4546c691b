// bench_sampler: one rank's indices for n = 1e6, 1e7, 1e8 and W = 8, volshard
// against PyTorch's Python DistributedSampler measured in the same run.
// Each measurement runs in its own process so that peak memory is its own.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "volshard/sampler/distributed_sampler.h"

namespace {

struct Measure {
  double seconds = 0;
  double extra_peak_bytes = 0;
  bool ok = false;
};

long rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

Measure volshard_once(int64_t n, int64_t world, int64_t rank) {
  int fd[2];
  if (pipe(fd) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    volshard::DistributedSamplerOptions o;
    o.dataset_size = n;
    o.num_replicas = world;
    o.rank = rank;
    volshard::DistributedSampler sampler(o);
    const long before = rss_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    const auto indices = sampler.indices();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    Measure m{seconds, static_cast<double>(ru.ru_maxrss * 1024L - before),
              indices.size() == sampler.num_samples()};
    if (write(fd[1], &m, sizeof m) != static_cast<ssize_t>(sizeof m)) _exit(1);
    _exit(0);
  }
  close(fd[1]);
  Measure m;
  const bool got = read(fd[0], &m, sizeof m) == static_cast<ssize_t>(sizeof m);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  m.ok = got && m.ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return m;
}

Measure torch_once(const std::string& script, int64_t n, int64_t world, int64_t rank) {
  const std::string cmd = std::string(VOLSHARD_PYTHON) + " " + script + " " + std::to_string(n) + " " +
                          std::to_string(world) + " " + std::to_string(rank) + " 2>/dev/null";
  Measure m;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    m.ok = fscanf(p, "%lf %lf", &m.seconds, &m.extra_peak_bytes) == 2;
    m.ok = pclose(p) == 0 && m.ok;
  }
  return m;
}

// Best of `reps` (time) and the largest peak seen.
template <typename F>
Measure best_of(int reps, F f) {
  Measure best;
  for (int r = 0; r < reps; ++r) {
    const Measure m = f();
    if (!m.ok) return m;
    if (!best.ok || m.seconds < best.seconds) best.seconds = m.seconds;
    best.extra_peak_bytes = std::max(best.extra_peak_bytes, m.extra_peak_bytes);
    best.ok = true;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string script = argc > 1 ? argv[1] : "bench/torch_sampler_baseline.py";
  const bool quick = std::getenv("VOLSHARD_BENCH_QUICK") != nullptr;
  const int64_t world = 8, rank = 3;
  std::vector<int64_t> sizes = {1000000, 10000000, 100000000};
  if (quick) sizes.pop_back();

  std::printf(
      "DistributedSampler, one rank's indices (W=%lld, rank %lld, shuffle, epoch 0); best of "
      "runs\n",
      static_cast<long long>(world), static_cast<long long>(rank));
  std::printf("%-11s | %12s %12s %9s | %14s %10s %14s\n", "n", "volshard s", "PyTorch s", "speedup",
              "volshard peak", "peak/(4n)", "PyTorch peak");
  std::printf("%s\n", std::string(95, '-').c_str());
  int status = 0;
  for (const int64_t n : sizes) {
    const int reps = n >= 100000000 ? 3 : 5;
    const Measure ours = best_of(reps, [&] { return volshard_once(n, world, rank); });
    const Measure torch =
        best_of(n >= 100000000 ? 1 : 3, [&] { return torch_once(script, n, world, rank); });
    if (!ours.ok) {
      std::printf("%-11lld | volshard run failed\n", static_cast<long long>(n));
      status = 1;
      continue;
    }
    char torch_s[32] = "n/a", speedup[32] = "n/a", torch_mb[32] = "n/a";
    if (torch.ok) {
      std::snprintf(torch_s, sizeof torch_s, "%.3f", torch.seconds);
      std::snprintf(speedup, sizeof speedup, "%.1fx", torch.seconds / ours.seconds);
      std::snprintf(torch_mb, sizeof torch_mb, "%.0f MB", torch.extra_peak_bytes / 1e6);
    }
    std::printf("%-11lld | %12.3f %12s %9s | %11.0f MB %10.2f %14s\n", static_cast<long long>(n),
                ours.seconds, torch_s, speedup, ours.extra_peak_bytes / 1e6,
                ours.extra_peak_bytes / (4.0 * static_cast<double>(n)), torch_mb);
  }
  std::printf("peak = resident-set high-water mark above the process's size before the call\n");
  return status;
}
