#pragma once
// Progress of a long task (caching, validation, repro) that a person or a log
// reads: on a terminal a bar with ETA rewritten in place on stderr; without
// one (a log file, SLURM) a timestamped line on stderr every few seconds and
// at the end, so a log is never silent for long. Std only; thread-safe.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace volshard {

enum class ProgressStyle { kAuto, kBar, kLines, kOff };  ///< kAuto: kBar on a TTY, else kLines

/// "h:mm:ss"; negative durations print as 0:00:00.
std::string duration_text(double seconds);

/// A duration as a person reads it: "850 us", "12.3 ms", "4.56 s", "2 min 05 s".
std::string readable_seconds(double seconds);

/// "2026-11-23 01:30:05Z" (UTC, to the second).
std::string utc_timestamp();

class Progress {
 public:
  /// `what` starts each line ("caching"), `unit` names what is counted
  /// ("volumes"). Lines come at most every `interval_s` seconds; the
  /// environment variable VOLSHARD_PROGRESS_SECONDS overrides it (tests, logs).
  Progress(std::string what, int64_t total, std::string unit,
           ProgressStyle style = ProgressStyle::kAuto, double interval_s = 5);
  ~Progress();  ///< finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// `done` of total units are complete; prints when it is time to.
  void update(int64_t done);
  /// The last line (or the bar's end), once.
  void finish();

 private:
  void print_locked(bool last);
  std::string what_, unit_;
  int64_t total_ = 0, done_ = 0;
  bool bar_ = false, off_ = false, finished_ = false;
  double interval_s_ = 5;
  std::chrono::steady_clock::time_point start_, last_print_;
  std::mutex mutex_;
};

}  // namespace volshard
