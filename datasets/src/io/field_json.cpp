#include "volshard/datasets/field_json.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "volshard/core/error.h"
#include "volshard/core/nearest_name.h"

namespace volshard::detail {

std::string json_value_text(const nlohmann::json& v) {
  return v.is_string() ? "'" + printable(v.get<std::string>()) + "'" : v.dump();
}

void fail_json_value(const Field& f, const nlohmann::json& v, const std::string& who,
                     const std::string& expected) {
  throw std::invalid_argument(who + f.key + "=" + json_value_text(v) + " is not a valid " + f.key +
                              " (" + expected + ")");
}

void json_to(const Field& f, const nlohmann::json& v, const std::string& who, bool& out) {
  if (v.is_boolean()) {
    out = v.get<bool>();
  } else if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) {
    out = v.get<int64_t>() == 1;
  } else {
    fail_json_value(f, v, who, "true or false");
  }
}

void json_to(const Field& f, const nlohmann::json& v, const std::string& who, double& out) {
  if (v.is_number() && !v.is_boolean()) {
    out = v.get<double>();
    return;
  }
  // "1.5", as the flag takes it.
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    out = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return;
  }
  fail_json_value(f, v, who, "a number");
}

void json_to(const Field& f, const nlohmann::json& v, const std::string& who, int64_t& out) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})
    throw std::invalid_argument(who + f.key + "=" + v.dump() +
                                " is out of range (a 64-bit integer at most)");
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return;
  }
  // 8.0 is 8, as Python's int() reads it.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == std::floor(d) && std::abs(d) < 9.2e18) {
      out = static_cast<int64_t>(d);
      return;
    }
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0) {
      out = x;
      return;
    }
  }
  fail_json_value(f, v, who, "an integer");
}

void json_to(const Field& f, const nlohmann::json& v, const std::string& who, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return;
  }
  int64_t x = 0;
  json_to(f, v, who, x);  // 8.0 and "8", as for any integer
  if (x < 0) fail_json_value(f, v, who, "an integer >= 0");
  out = static_cast<uint64_t>(x);
}

void json_to(const Field& f, const nlohmann::json& v, const std::string& who, std::string& out) {
  if (!v.is_string()) fail_json_value(f, v, who, "a string");
  out = v.get<std::string>();
}

std::vector<nlohmann::json> json_elements(const nlohmann::json& v) {
  std::vector<nlohmann::json> out;
  if (v.is_array()) {
    for (const nlohmann::json& e : v) out.push_back(e);
  } else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    size_t begin = 0;
    while (!s.empty()) {
      const size_t comma = s.find(',', begin);
      out.emplace_back(
          s.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
  } else {
    out.push_back(v);
  }
  return out;
}

void fail_enum_value(const Field& f, const nlohmann::json& v, const std::string& who,
                     const std::vector<std::string>& names) {
  std::string listed;
  for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
  // The nearest as the flags name it.
  const std::string nearest =
      v.is_string() ? nearest_choice(ascii_lower(v.get<std::string>()), names) : std::string();
  throw std::invalid_argument(who + f.key + "=" + json_value_text(v) + " must be one of " + listed +
                              (nearest.empty() ? "" : "; did you mean '" + nearest + "'?"));
}

}  // namespace volshard::detail
