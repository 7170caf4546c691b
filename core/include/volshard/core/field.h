#pragma once
// One row of an options table: a field's key, help and bounds, written once
// beside the struct it describes. A table is a function template
// `for_each_..._field(options, visit)` that calls visit(Field, member) for
// each field; the flags, the JSON, validation and the Python bindings all
// walk it (tensorstore binds a type's JSON once beside the type). Std only.

#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "volshard/core/error.h"

namespace volshard {

/// Whether a table member is a list (std::vector): flags and JSON take it
/// comma-separated or as an array.
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

/// The name of `value` among enum_names(E{}) (declared beside each enum, as
/// the JSON and the flags spell its values).
template <class E>
std::string enum_name(E value) {
  for (const auto& [name, v] : enum_names(E{}))
    if (v == value) return name;
  return "?";
}

/// One row of an options table: the JSON key (the flag is "--" + key with
/// '-' for '_'), the help text, and the closed or open bounds of a number.
struct Field {
  const char* key;
  const char* help;
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool must_be_finite = false;  ///< +-inf refused too (nan always is, by any bound)
  bool in_json = true;          ///< false: a flag only (not saved in RUN/config.json)
  /// A training step only: whole-volume commands (predict, prepare) show no
  /// flag for it and ignore a config's value.
  bool training_only = false;
  /// `volshard train` sets it from the network (a pipeline's num_classes from
  /// out_channels): no flag there, not in RUN/config.json; a Loader's or the
  /// bench's pipeline sets it.
  bool set_by_network = false;
  /// In the persistent cache's key (a table of what a cached step computes,
  /// as for_each_prefix_field): every row is, unless it only checks the input
  /// and changes no value. A new row is in the key without a word: a
  /// forgotten one could only cost a rebuild, never serve a stale entry.
  bool in_cache_key = true;
  /// A command's own spelling of the flag (nullptr: "--" + key, '-' for '_').
  const char* flag_name = nullptr;
  /// What the field is to a run's identity.
  enum class Role {
    kOther,
    kKept,   ///< the data, the randomness or the network: a resumed run must keep it
    kLocal,  ///< where a run writes or how it waits, not what it computes: diff sets it aside
  };
  Role role = Role::kOther;

  Field(const char* k, const char* h) : key(k), help(h) {}
  Field& at_least(double v) { return lo = v, *this; }
  Field& above(double v) { return lo = v, lo_open = true, *this; }
  Field& at_most(double v) { return hi = v, *this; }
  Field& below(double v) { return hi = v, hi_open = true, *this; }
  Field& finite() { return must_be_finite = true, *this; }
  Field& flag_only() { return in_json = false, *this; }
  Field& for_training_only() { return training_only = true, *this; }
  Field& from_network() { return set_by_network = true, *this; }
  Field& kept_on_resume() { return role = Role::kKept, *this; }
  Field& run_local() { return role = Role::kLocal, *this; }
  Field& not_in_cache_key() { return in_cache_key = false, *this; }
  /// "--batch-size"
  std::string flag() const;
  /// Throws FieldError "<who>: key=value must be in [lo, hi]" (or ">= lo",
  /// "> lo", ...; without "<who>: " when `who` is empty) when `value` is
  /// outside the bounds; a command line tool shows the flag for the key.
  void check(double value, const std::string& value_text, const std::string& who) const;
};

/// A field as a library message names it: read as it is (what()), the
/// message says its key, as a config file, the Python module and
/// RUN/config.json spell it ("crop=0 must be >= 1"); a command line tool
/// shows the row's flag instead (FieldError::flag_text: "--crop=0 must be
/// >= 1"). `f` gives the flag its row spells (predict's weights: --model).
std::string field_ref(const Field& f);
std::string field_ref(const char* key);

/// std::invalid_argument whose message names its fields with field_ref.
class FieldError : public std::invalid_argument {
 public:
  explicit FieldError(const std::string& marked);
  /// The message with each field named by its flag, for a command line.
  std::string flag_text() const;
  /// The message as made, field_refs kept, for a message that quotes it.
  const std::string& marked() const { return marked_; }

 private:
  std::string marked_;
};

/// What a message that quotes `e` should quote, field_refs kept where `e`
/// is a FieldError: FieldError(context + quoted(e)) keeps its flags.
std::string quoted(const std::exception& e);
/// `e`'s message as a command line tool shows it: each field by its flag.
std::string flag_text(const std::exception& e);

/// A table's visitor that checks every number against its field's bounds
/// (Field::check), the value as the flag would take it ("0.5", "96").
struct CheckFieldBounds {
  std::string who;  ///< the message's "<who>: " ("": none)
  template <class T>
  void operator()(const Field& f, const T& value) const {
    if constexpr (std::is_floating_point_v<T>) {
      f.check(value, value_text(value), who);
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      f.check(static_cast<double>(value), std::to_string(value), who);
    }
  }
};

}  // namespace volshard
