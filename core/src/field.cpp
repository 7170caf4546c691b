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
  throw FieldError((who.empty() ? "" : who + ": ") + field_ref(*this) + "=" + value_text +
                   " must be " + bound);
}

namespace {

// A field_ref is kUnit key kRecord flag kUnit: control characters no key,
// flag or printable value holds.
constexpr char kUnit = '\x1f';
constexpr char kRecord = '\x1e';

// `marked` with each field_ref as its key or its flag.
std::string render(const std::string& marked, bool flags) {
  std::string out;
  out.reserve(marked.size());
  size_t at = 0;
  while (at < marked.size()) {
    const size_t open = marked.find(kUnit, at);
    const size_t middle = open == std::string::npos ? open : marked.find(kRecord, open + 1);
    const size_t close = middle == std::string::npos ? middle : marked.find(kUnit, middle + 1);
    if (close == std::string::npos) {
      out.append(marked, at, std::string::npos);
      break;
    }
    out.append(marked, at, open - at);
    if (flags) {
      out.append(marked, middle + 1, close - middle - 1);
    } else {
      out.append(marked, open + 1, middle - open - 1);
    }
    at = close + 1;
  }
  return out;
}

}  // namespace

std::string field_ref(const Field& f) {
  return std::string(1, kUnit) + f.key + kRecord + f.flag() + kUnit;
}

std::string field_ref(const char* key) { return field_ref(Field(key, "")); }

FieldError::FieldError(const std::string& marked)
    : std::invalid_argument(render(marked, false)), marked_(marked) {}

std::string FieldError::flag_text() const { return render(marked_, true); }

std::string quoted(const std::exception& e) {
  const auto* field = dynamic_cast<const FieldError*>(&e);
  return field != nullptr ? field->marked() : e.what();
}

std::string flag_text(const std::exception& e) {
  const auto* field = dynamic_cast<const FieldError*>(&e);
  return field != nullptr ? field->flag_text() : e.what();
}

}  // namespace volshard
