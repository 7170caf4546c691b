#include "progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace volshard {

std::string number_text(double v, int digits) {
  std::ostringstream s;
  s.precision(digits);
  s << v;
  return s.str();
}

std::string duration_text(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

void print_step_progress(const StepProgress& p, bool tty) {
  std::ostringstream line;
  line << "epoch " << p.epoch + 1 << "/" << p.epochs << " step " << p.step << "/" << p.total_steps
       << " loss " << number_text(p.loss, 4) << " | " << number_text(p.samples_per_s, 3)
       << " samples/s | data-wait " << number_text(100 * p.wait_fraction, 2) << "% | ETA "
       << duration_text(p.eta_seconds);
  if (tty)
    std::cerr << "\r" << line.str() << "   " << std::flush;
  else
    std::cout << line.str() << "\n" << std::flush;
}

void print_epoch_line(int64_t epoch, int64_t epochs, double loss, double val_dice) {
  std::cout << "epoch " << epoch + 1 << "/" << epochs << ": loss " << number_text(loss, 4)
            << (std::isnan(val_dice) ? std::string()
                                     : ", validation Dice " + number_text(val_dice, 4))
            << "\n"
            << std::flush;
}

}  // namespace volshard
