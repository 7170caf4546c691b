#include "engine/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "volshard/core/log.h"
#include "volshard/trainer/train.h"

namespace volshard {
namespace {

struct RunLog {
  std::mutex mutex;
  std::unique_ptr<std::ofstream> file;
};

RunLog& run_log() {
  static RunLog log;
  return log;
}

void append_to_run_log(const std::string& line) {
  RunLog& log = run_log();
  const std::lock_guard<std::mutex> lock(log.mutex);
  if (log.file) *log.file << "[" << utc_timestamp() << "] " << line << "\n" << std::flush;
}

}  // namespace

void open_run_log(const std::string& path, bool append) {
  auto file = std::make_unique<std::ofstream>(path, append ? std::ios::app : std::ios::trunc);
  if (!*file) throw std::runtime_error(path + ": cannot open the run's log for writing");
  {
    RunLog& log = run_log();
    const std::lock_guard<std::mutex> lock(log.mutex);
    log.file = std::move(file);
  }
  set_warning_handler([](const std::string& message) {
    const std::string line = "volshard: warning: " + message;
    std::cerr << line << "\n";
    append_to_run_log(line);
  });
}

void print_run_line(std::ostream& stream, const std::string& line) {
  stream << line << "\n" << std::flush;
  append_to_run_log(line);
}

std::string number_text(double v, int digits) {
  std::ostringstream s;
  s.precision(digits);
  s << v;
  return s.str();
}

void print_step_progress(const StepProgress& p, bool tty) {
  std::ostringstream line;
  line << "epoch " << p.epoch + 1 << "/" << p.epochs << " step " << p.step << "/" << p.total_steps
       << " loss " << number_text(p.loss, 4) << " | " << number_text(p.samples_per_s, 3)
       << " samples/s | data-wait " << readable_seconds(p.wait_seconds) << " ("
       << number_text(100 * p.wait_fraction, 2) << "%) | ETA " << duration_text(p.eta_seconds);
  if (tty) {
    constexpr int kWidth = 20;
    const double fraction =
        p.total_steps > 0 ? static_cast<double>(p.step) / static_cast<double>(p.total_steps) : 0;
    const int filled = static_cast<int>(std::lround(kWidth * std::min(1.0, fraction)));
    std::cerr << "\r[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] "
              << line.str() << "   " << std::flush;
  } else {
    std::cout << "[" << utc_timestamp() << "] " << line.str() << "\n" << std::flush;
  }
  append_to_run_log(line.str());
}

void print_epoch_line(int64_t epoch, int64_t epochs, double loss, double val_dice,
                      const std::vector<double>& per_class,
                      const std::vector<std::string>& class_names) {
  std::string classes;  // with more than one class, each beside the mean
  if (!std::isnan(val_dice) && per_class.size() > 1 && per_class.size() == class_names.size()) {
    for (size_t c = 0; c < per_class.size(); ++c)
      classes += (c == 0 ? " (" : ", ") + class_names[c] + " " + number_text(per_class[c], 4);
    classes += ")";
  }
  print_run_line(std::cout, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs) +
                                ": loss " + number_text(loss, 4) +
                                (std::isnan(val_dice)
                                     ? std::string()
                                     : ", validation Dice " + number_text(val_dice, 4) + classes));
}

}  // namespace volshard
