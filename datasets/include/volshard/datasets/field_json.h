#pragma once
// An options table's fields (volshard/core/field.h) to and from JSON, each by
// its member's type: the one JSON conversion of configs/*.json, RUN/config.json
// and the Python Loader's pipeline. Enums by name (enum_names), lists as
// arrays (or, as the flags take them, a comma-separated string or one value).
// For .cpp files that link nlohmann_json.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "volshard/core/field.h"
#include "volshard/core/nearest_name.h"

namespace volshard {
namespace detail {

/// A JSON value as a message quotes it: strings in single quotes, as Python's
/// repr (the Loader's users write Python), anything else as JSON.
std::string json_value_text(const nlohmann::json& v);
/// "<who><key>=<value> is not a valid <key> (<expected>)"
[[noreturn]] void fail_json_value(const Field& f, const nlohmann::json& v, const std::string& who,
                                  const std::string& expected);
void json_to(const Field& f, const nlohmann::json& v, const std::string& who, bool& out);
void json_to(const Field& f, const nlohmann::json& v, const std::string& who, int64_t& out);
/// A seed: the whole 64-bit range, or what the int64_t overload takes if not negative.
void json_to(const Field& f, const nlohmann::json& v, const std::string& who, uint64_t& out);
void json_to(const Field& f, const nlohmann::json& v, const std::string& who, double& out);
void json_to(const Field& f, const nlohmann::json& v, const std::string& who, std::string& out);
/// A list's elements: an array's, a string's comma-separated parts, or the one value.
std::vector<nlohmann::json> json_elements(const nlohmann::json& v);
/// "<who>key=value must be one of a, b; did you mean 'a'?"
[[noreturn]] void fail_enum_value(const Field& f, const nlohmann::json& v, const std::string& who,
                                  const std::vector<std::string>& names);

}  // namespace detail

/// Sets `out` from `v`, the JSON value of field `f`. Throws
/// std::invalid_argument "<who>key=value is not a valid key (...)" for a value
/// of the wrong type, "... must be one of a, b; did you mean 'a'?" for an
/// unknown enum name (names in any case, as the flags take them).
template <class T>
void field_from_json(const Field& f, const nlohmann::json& v, const std::string& who, T& out) {
  if constexpr (std::is_enum_v<T>) {
    std::vector<std::string> names;
    for (const auto& [name, value] : enum_names(T{})) {
      if (v.is_string() && ascii_lower(v.get<std::string>()) == name) return void(out = value);
      names.push_back(name);
    }
    detail::fail_enum_value(f, v, who, names);
  } else if constexpr (IsVector<T>::value) {
    T list;
    for (const nlohmann::json& e : detail::json_elements(v)) {
      typename T::value_type x{};
      detail::json_to(f, e, who, x);
      list.push_back(x);
    }
    out = std::move(list);
  } else {
    detail::json_to(f, v, who, out);
  }
}

/// The one reader of a table's fields from a JSON object (configs/*.json,
/// RUN/config.json, a Python pipeline, `--config`): every field of `options`
/// whose key `j` holds and that `take(field)` accepts is set through
/// field_from_json. `table(options, visit)` walks the rows, as
/// for_each_feed_field does. Keys `j` holds beyond the table's are the
/// caller's to refuse or skip.
template <class Options, class Table, class Take>
void fields_from_json(const nlohmann::json& j, const std::string& who, Options& options,
                      Table&& table, Take&& take) {
  table(options, [&](const Field& f, auto& member) {
    const auto it = j.find(f.key);
    if (it != j.end() && take(f)) field_from_json(f, *it, who, member);
  });
}

/// Every row of an options table that is in the persistent cache's key
/// (Field::in_cache_key), as one JSON object's text (keys sorted, enums by
/// name): the key of what the table's options compute. `table(options,
/// visit)` walks the rows, as for_each_prefix_field does.
template <class Options, class Table>
std::string cache_key_text(const Options& options, Table&& table) {
  nlohmann::json j = nlohmann::json::object();
  table(options, [&j](const Field& f, const auto& value) {
    if (!f.in_cache_key) return;
    if constexpr (std::is_enum_v<std::decay_t<decltype(value)>>) {
      j[f.key] = enum_name(value);
    } else {
      j[f.key] = value;
    }
  });
  return j.dump();
}

/// Visits a table, writing every field saved in JSON (Field::in_json) into
/// `*out`; enums by name.
struct FieldToJson {
  nlohmann::json* out;
  template <class T>
  void operator()(const Field& f, const T& value) const {
    if (!f.in_json) return;
    if constexpr (std::is_enum_v<T>) {
      (*out)[f.key] = enum_name(value);
    } else {
      (*out)[f.key] = value;
    }
  }
};

}  // namespace volshard
