#include "volshard/core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace volshard {

std::string duration_text(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

std::string readable_seconds(double seconds) {
  char buf[48];
  const double s = std::max(0.0, seconds);
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  else if (s < 1)
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  else if (s < 60)
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  else
    std::snprintf(buf, sizeof buf, "%lld min %02lld s", static_cast<long long>(s / 60),
                  static_cast<long long>(std::fmod(s, 60)));
  return buf;
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

Progress::Progress(std::string what, int64_t total, std::string unit, ProgressStyle style,
                   double interval_s)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      interval_s_(interval_s),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {
  if (const char* env = std::getenv("VOLSHARD_PROGRESS_SECONDS")) interval_s_ = std::atof(env);
  if (style == ProgressStyle::kAuto)
    style = ::isatty(STDERR_FILENO) ? ProgressStyle::kBar : ProgressStyle::kLines;
  bar_ = style == ProgressStyle::kBar;
  off_ = style == ProgressStyle::kOff || total_ <= 0;
}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done) {
  const std::lock_guard<std::mutex> lock(mutex_);
  done_ = std::max(done_, done);
  if (off_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  // A bar redraws often (a person watches it); lines wait for the interval,
  // and leave the complete count to finish()'s last line (said once in a log).
  if (!bar_ && done_ >= total_) return;
  if (since < (bar_ ? 0.2 : interval_s_) && done_ < total_) return;
  last_print_ = now;
  print_locked(false);
}

void Progress::finish() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (off_ || finished_) return;
  finished_ = true;
  print_locked(true);
}

void Progress::print_locked(bool last) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double fraction = static_cast<double>(done_) / static_cast<double>(total_);
  const std::string eta =
      done_ > 0 ? duration_text(elapsed * (1 - fraction) / fraction) : std::string("?");
  char counts[96];
  std::snprintf(counts, sizeof counts, "%lld/%lld %s (%.0f%%)", static_cast<long long>(done_),
                static_cast<long long>(total_), unit_.c_str(), 100 * fraction);
  if (bar_) {
    constexpr size_t kWidth = 24;
    const auto filled = static_cast<size_t>(std::lround(kWidth * std::min(1.0, fraction)));
    const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
    std::fprintf(stderr, "\r%s [%s] %s %s %s   %s", what_.c_str(), bar.c_str(), counts,
                 last ? "in" : "ETA", last ? duration_text(elapsed).c_str() : eta.c_str(),
                 last ? "\n" : "");
  } else {
    std::fprintf(stderr, "[%s] %s: %s, %s elapsed%s\n", utc_timestamp().c_str(), what_.c_str(),
                 counts, duration_text(elapsed).c_str(), last ? "" : (", ETA " + eta).c_str());
  }
  std::fflush(stderr);
}

}  // namespace volshard
