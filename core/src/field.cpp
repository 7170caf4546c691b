#include "volshard/core/field.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace volshard {

std::string Field::flag() const {
  if (flag_name != nullptr) return flag_name;
  std::string f = std::string("--") + key;
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

void Field::check(double value, const std::string& value_text, const std::string& who) const {
  const bool low = lo_open ? !(value > lo) : !(value >= lo);
  const bool high = hi_open ? !(value < hi) : !(value <= hi);
  if (!low && !high && !(must_be_finite && std::isinf(value))) return;
  auto number = [](double v) {  // bounds are round numbers: 1000000, not 1e+06
    char buf[32];
    if (v == std::floor(v) && std::abs(v) < 1e15) {
      std::snprintf(buf, sizeof buf, "%.0f", v);
    } else {
      std::snprintf(buf, sizeof buf, "%g", v);
    }
    return std::string(buf);
  };
  std::string bound;
  if (std::isinf(hi)) {
    bound = (lo_open ? "> " : ">= ") + number(lo);
  } else if (std::isinf(lo)) {
    bound = (hi_open ? "< " : "<= ") + number(hi);
  } else {
    bound = std::string("in ") + (lo_open ? "(" : "[") + number(lo) + ", " + number(hi) +
            (hi_open ? ")" : "]");
  }
  throw std::invalid_argument((who.empty() ? "" : who + ": ") + flag() + "=" + value_text +
                              " must be " + bound);
}

}  // namespace volshard
