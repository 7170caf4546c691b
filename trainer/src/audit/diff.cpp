#include "volshard/trainer/diff.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "engine/resume.h"
#include "io/json_lines.h"
#include "volshard/core/file_io.h"
#include "volshard/datasets/field_json.h"
#include "volshard/trainer/options.h"

namespace volshard {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct Run {
  std::string dir;
  std::string config;             // config.json's text
  std::string trace;              // its --trace-samples file, when it kept one
  json layout;                    // the buckets' parameter names
  std::map<int64_t, json> steps;  // fingerprints by global step
  int64_t world = 0;              // of the first step
  bool invariant = false;
  // Steps at which the world size changed (an elastic resume): step, before, after.
  struct WorldChange {
    int64_t step, from, to;
  };
  std::vector<WorldChange> world_changes;

  // "2" or "2, then 1 from step 9".
  std::string world_text() const {
    std::string text = std::to_string(world);
    for (const WorldChange& c : world_changes)
      text += ", then " + std::to_string(c.to) + " from step " + std::to_string(c.step);
    return text;
  }
  // The first change at or before `step`, if any.
  const WorldChange* change_by(int64_t step) const {
    for (const WorldChange& c : world_changes)
      if (c.step <= step) return &c;
    return nullptr;
  }
};

// diff's exit status 1 says that the runs part: a file it cannot read is bad
// input (2) like a missing one, so a reader's std::runtime_error (a bad file,
// named) becomes std::invalid_argument.
template <typename Read>
auto as_bad_input(const Read& read) -> decltype(read()) {
  try {
    return read();
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string("diff: ") + e.what());
  } catch (const json::exception& e) {  // a value of a type nothing checked
    throw std::invalid_argument(std::string("diff: ") + e.what());
  }
}

// Bounds on the files diff reads (config.json; fingerprints.jsonl and traces
// take JsonLinesLimits').
constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;

// A value from a file, in a message: at most 40 characters of its JSON.
std::string shown(const json& v) {
  const std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

// The fields of a fingerprints.jsonl line that diff reads, checked before any is
// compared: a wrong type or a step number that is not one is bad input, named
// "path:line".
class LineCheck {
 public:
  LineCheck(const std::string& path, const JsonLine& line) : line_(line) {
    where_ = "diff: " + path + ":" + std::to_string(line.number) + ": ";
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw std::invalid_argument(printable(where_ + why));
  }
  const json& field(const char* key) const {
    const auto it = line_.value.find(key);
    if (it == line_.value.end())
      fail("a " + line_.value.value("type", std::string()) + " line without \"" + key + "\"");
    return *it;
  }
  // A whole number >= `from` (1e300, 1.5 and "1" are not).
  int64_t whole(const char* key, int64_t from) const {
    const json& v = field(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX) ||
        v.get<int64_t>() < from)
      fail("\"" + std::string(key) + "\" must be a whole number from " + std::to_string(from) +
           ", not " + shown(v));
    return v.get<int64_t>();
  }
  void string(const char* key) const {
    if (!field(key).is_string())
      fail("\"" + std::string(key) + "\" must be a string, not " + shown(field(key)));
  }
  void strings(const json& v, const std::string& key, const char* what) const {
    bool ok = v.is_array();
    for (size_t i = 0; ok && i < v.size(); ++i) ok = v[i].is_string();
    if (!ok) fail("\"" + key + "\" must be " + what + ", not " + shown(v));
  }

 private:
  const JsonLine& line_;
  std::string where_;
};

Run read_run(const std::string& dir) {
  Run r;
  r.dir = dir;
  const fs::path config = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::exists(config, ec))
    throw std::invalid_argument("diff: " + dir + " is not a run folder (no config.json)");
  r.config = read_regular_file(config.string(), kMaxConfigBytes);
  if (detail::nested_deeper_than(r.config, JsonLinesLimits().max_depth))
    throw std::invalid_argument("diff: " + config.string() + ": nested deeper than " +
                                std::to_string(JsonLinesLimits().max_depth) + " levels");
  const json c = json::parse(r.config, nullptr, false);
  if (c.is_discarded())
    throw std::invalid_argument("diff: " + config.string() + ": not valid JSON");
  if (!c.is_object())
    throw std::invalid_argument("diff: " + config.string() + ": not a JSON object but a JSON " +
                                c.type_name());
  // Every key of the table, through its row and the one JSON conversion (field_json.h, as a
  // config given to --config and the Python Loader's pipeline); a key the table does not
  // have (another version's) is left to the configs' comparison.
  TrainOptions saved;
  fields_from_json(
      c, "diff: " + config.string() + ": ", saved,
      [](TrainOptions& o, auto&& visit) { TrainOptions::for_each_field(o, visit); },
      [](const Field& f) { return f.in_json; });
  r.invariant = saved.invariant;
  r.trace = saved.trace_samples;
  const fs::path prints = fs::path(dir) / "fingerprints.jsonl";
  if (!fs::exists(prints, ec) && !fs::is_symlink(prints, ec))
    throw std::invalid_argument("diff: " + prints.string() +
                                " is missing (a run with --no-fingerprints, or from before "
                                "fingerprints): nothing to compare step by step");
  const std::vector<JsonLine> lines = read_json_object_lines(prints.string());
  int64_t previous = 0;
  for (const JsonLine& line : lines) {
    const LineCheck check(prints.string(), line);
    const json type = line.value.value("type", json());
    if (!type.is_string()) check.fail("\"type\" must be a string, not " + shown(type));
    if (type == "layout") {
      const json& buckets = check.field("buckets");
      bool ok = buckets.is_array();
      for (size_t b = 0; ok && b < buckets.size(); ++b) {
        ok = buckets[b].is_array();
        for (size_t i = 0; ok && i < buckets[b].size(); ++i) ok = buckets[b][i].is_string();
      }
      if (!ok) check.fail("\"buckets\" must be a list of lists of strings, not " + shown(buckets));
      r.layout = buckets;
    } else if (type == "step") {
      // Steps count from 1 and increase: a step renumbered (to -5, or 1e300)
      // would otherwise match no step of the other run and compare nothing.
      const int64_t step = check.whole("step", 1);
      if (step <= previous)
        check.fail("step " + std::to_string(step) + " follows step " + std::to_string(previous) +
                   ": steps must increase");
      previous = step;
      check.whole("epoch", 0);
      check.whole("world", 1);
      for (const char* key : {"indices", "augmentation", "bytes"}) check.string(key);
      if (!check.field("loss").is_number() && !check.field("loss").is_null())
        check.fail("\"loss\" must be a number or null, not " + shown(check.field("loss")));
      for (const char* key : {"grads", "weights"})
        check.strings(check.field(key), key, "a list of strings");
      r.steps[step] = line.value;
    }
  }
  if (!r.steps.empty()) r.world = r.steps.begin()->second.value("world", int64_t{0});
  int64_t last = r.world;
  for (const auto& [step, j] : r.steps) {
    const int64_t w = j.value("world", int64_t{0});
    if (w != last) r.world_changes.push_back({step, last, w});
    last = w;
  }
  return r;
}

// The parameters of bucket `b`, for a message: "a .. z (n parameters)".
std::string bucket_text(const json& layout, size_t b) {
  if (!layout.is_array() || b >= layout.size() || !layout[b].is_array() || layout[b].empty())
    return "bucket " + std::to_string(b);
  const json& names = layout[b];
  std::string text = "bucket " + std::to_string(b) + " of " + std::to_string(layout.size()) + ": " +
                     names.front().get<std::string>();
  if (names.size() > 1)
    text += " .. " + names.back().get<std::string>() + " (" + std::to_string(names.size()) +
            " parameters)";
  return text;
}

// The first part of a step that differs, in the order the step makes them,
// with what it is ("gradients" names the bucket); "" when all are equal.
std::pair<std::string, std::string> first_part(const json& a, const json& b, const json& layout) {
  static const std::vector<std::pair<const char*, const char*>> kParts{
      {"indices", "data order"},
      {"augmentation", "augmentation"},
      {"bytes", "batch bytes"},
      {"loss", "loss"}};
  for (const auto& [key, name] : kParts)
    if (a.value(key, json()) != b.value(key, json())) return {name, name};
  for (const char* key : {"grads", "weights"}) {
    const json ga = a.value(key, json::array()), gb = b.value(key, json::array());
    const std::string name = std::string(key) == "grads" ? "gradients" : "weights";
    for (size_t i = 0; i < std::max(ga.size(), gb.size()); ++i)
      if (i >= ga.size() || i >= gb.size() || ga[i] != gb[i])
        return {name, name + " (" + bucket_text(layout, i) + ")"};
  }
  return {"", ""};
}

// The trace's rows of `step` (every rank's), as sorted text without the
// rank, so that two runs' rows compare whatever rank read a sample.
std::vector<std::string> trace_rows(const std::string& path, int64_t step) {
  std::vector<std::string> rows;
  for (json j : read_json_lines(path)) {
    const auto at = j.find("step");
    if (at == j.end() || !at->is_number_integer() || at->get<int64_t>() != step) continue;
    j.erase("rank");
    rows.push_back(j.dump());
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

// With both runs' traces: the first sample of `step` that one has and the
// other has not ("" without traces, or when they agree).
std::string first_trace_difference(const Run& a, const Run& b, int64_t step) {
  if (a.trace.empty() || b.trace.empty() || !fs::exists(a.trace) || !fs::exists(b.trace)) return "";
  const std::vector<std::string> ra = trace_rows(a.trace, step), rb = trace_rows(b.trace, step);
  std::vector<std::string> only_a, only_b;
  std::set_difference(ra.begin(), ra.end(), rb.begin(), rb.end(), std::back_inserter(only_a));
  std::set_difference(rb.begin(), rb.end(), ra.begin(), ra.end(), std::back_inserter(only_b));
  if (only_a.empty() && only_b.empty()) return "";
  return "traces at step " + std::to_string(step) + ": A read " +
         (only_a.empty() ? std::string("nothing B did not") : only_a.front()) + ", B read " +
         (only_b.empty() ? std::string("nothing A did not") : only_b.front()) + "\n";
}

// Whether two files hold the same bytes, read a block at a time: each must be
// a regular file (a /dev/zero would never end).
bool same_bytes(const std::string& a, const std::string& b) {
  int64_t size_a = 0, size_b = 0;
  const Fd fa = open_regular_file(a, &size_a), fb = open_regular_file(b, &size_b);
  if (size_a != size_b) return false;
  std::vector<uint8_t> block_a(size_t{1} << 20), block_b(block_a.size());
  for (int64_t at = 0; at < size_a;) {
    const auto n = static_cast<size_t>(std::min<int64_t>(size_a - at, 1 << 20));
    read_exactly(fa.get(), block_a.data(), n, at, a);
    read_exactly(fb.get(), block_b.data(), n, at, b);
    if (std::memcmp(block_a.data(), block_b.data(), n) != 0) return false;
    at += static_cast<int64_t>(n);
  }
  return true;
}

RunDiff compare_runs(const std::string& run_a, const std::string& run_b) {
  const Run a = read_run(run_a), b = read_run(run_b);
  RunDiff d;
  std::ostringstream out;
  // Options that change where a run writes or how it waits, not what it
  // computes (Field::run_local: loader threads, the batches are the same for any count).
  const std::set<std::string>& run_local = TrainOptions::keys_with(Field::Role::kLocal);
  const auto counted = [&](const std::string& key) { return run_local.count(key) == 0; };
  const std::string options = option_differences(a.config, b.config, counted);
  const std::string local =
      option_differences(a.config, b.config, [&](const std::string& key) { return !counted(key); });
  out << "configs: " << (options.empty() ? "equal" : "differ: " + options)
      << (local.empty() ? "" : " (also, not changing what is computed: " + local + ")") << "\n";
  out << "world size: " << a.world_text() << " (A), " << b.world_text() << " (B)"
      << (a.invariant && b.invariant ? ", both --invariant" : "") << "\n";
  out << "steps fingerprinted: " << a.steps.size() << " (A), " << b.steps.size() << " (B)\n";
  json first_a, first_b;
  std::string part_text;
  for (const auto& [step, fa] : a.steps) {
    const auto it = b.steps.find(step);
    if (it == b.steps.end()) continue;
    const auto [part, text] = first_part(fa, it->second, a.layout);
    if (part.empty()) continue;
    d.first_step = step;
    d.first_part = part;
    part_text = text;
    first_a = fa;
    first_b = it->second;
    break;
  }
  const fs::path ma = fs::path(run_a) / "model.pt", mb = fs::path(run_b) / "model.pt";
  // Runs fingerprinted from Python (volshard.Fingerprint) may have no model.pt.
  const bool no_models = !fs::exists(ma) && !fs::exists(mb);
  const bool models_equal =
      no_models || (fs::exists(ma) && fs::exists(mb) && same_bytes(ma.string(), mb.string()));
  if (d.first_step < 0) {
    out << "every common step's fingerprints are equal; model.pt "
        << (no_models      ? "in neither run"
            : models_equal ? "equal"
                           : "DIFFERS")
        << "\n";
    // The same steps, not only as many: every step of each compared.
    const bool same_steps =
        std::equal(a.steps.begin(), a.steps.end(), b.steps.begin(), b.steps.end(),
                   [](const auto& x, const auto& y) { return x.first == y.first; });
    d.identical = options.empty() && models_equal && same_steps;
    const auto span = [](const Run& r) {
      return r.steps.empty() ? std::string("none")
                             : std::to_string(r.steps.begin()->first) + " to " +
                                   std::to_string(r.steps.rbegin()->first);
    };
    const bool one_went_further =
        std::includes(a.steps.begin(), a.steps.end(), b.steps.begin(), b.steps.end(),
                      [](const auto& x, const auto& y) { return x.first < y.first; }) ||
        std::includes(b.steps.begin(), b.steps.end(), a.steps.begin(), a.steps.end(),
                      [](const auto& x, const auto& y) { return x.first < y.first; });
    d.cause = d.identical ? "none: the runs are the same"
              : !same_steps && !one_went_further
                  ? "the runs fingerprinted other steps (A " + span(a) + ", B " + span(b) +
                        "): the steps both have agree"
              : !models_equal
                  ? "the steps agree but model.pt does not: a run stopped at another step, or "
                    "validation-only options (best weights) differ"
                  : "the runs agree as far as both went";
    if (!options.empty() && models_equal)
      d.cause = "the options that differ did not change the steps";
  } else {
    out << "first difference: step " << d.first_step << " (epoch "
        << first_a.value("epoch", int64_t{0}) + 1 << "), " << part_text;
    static const std::vector<std::string> kOrder{"data order", "augmentation", "batch bytes",
                                                 "loss",       "gradients",    "weights"};
    const auto at = std::find(kOrder.begin(), kOrder.end(), d.first_part) - kOrder.begin();
    if (at > 0) {
      out << ", after equal ";
      for (std::ptrdiff_t i = 0; i < at; ++i)
        out << (i ? ", " : "") << kOrder[static_cast<size_t>(i)];
    }
    out << "\n";
    if (d.first_part == "data order" || d.first_part == "augmentation")
      out << first_trace_difference(a, b, d.first_step);
    const bool same_world = a.world == b.world;
    const bool invariant = a.invariant && b.invariant;
    const Run::WorldChange* elastic_a = a.change_by(d.first_step);
    const Run::WorldChange* elastic_b = b.change_by(d.first_step);
    const auto elastic_text = [](const char* run, const Run::WorldChange& c) {
      return std::string(run) + " resumed on another world size at step " + std::to_string(c.step) +
             " (" + std::to_string(c.from) + " -> " + std::to_string(c.to) +
             " ranks: an elastic resume; without --invariant each rank's batch and the order of "
             "the all-reduce's float sums change with it)";
    };
    if (!options.empty()) {
      d.cause = "a changed option: " + options;
    } else if (!invariant && (elastic_a != nullptr || elastic_b != nullptr)) {
      d.cause =
          elastic_a != nullptr ? elastic_text("A", *elastic_a) : elastic_text("B", *elastic_b);
      if (elastic_a != nullptr && elastic_b != nullptr)
        d.cause += "; " + elastic_text("B", *elastic_b);
    } else if (!same_world && !invariant) {
      d.cause = "a different world size (" + std::to_string(a.world) + " and " +
                std::to_string(b.world) +
                ") without --invariant: each rank's batch and the order of the all-reduce's float "
                "sums depend on it";
    } else if (d.first_part == "gradients") {
      d.cause =
          "a nondeterministic kernel or reduction: the data, the batch bytes and the loss are "
          "equal "
          "and the gradients are not (see --deterministic and --threads)";
    } else if (d.first_part == "data order" || d.first_part == "augmentation") {
      d.cause =
          "the same options read other samples: the data files, their number or their order "
          "changed";
    } else if (d.first_part == "batch bytes") {
      d.cause = "the same samples and augmentation gave other bytes: the data files changed";
    } else if (d.first_part == "loss") {
      d.cause =
          "the same batch gave another loss: the weights before this step differ (a run "
          "started from other weights, --init-weights), or a nondeterministic forward kernel";
    } else {
      d.cause =
          "the same gradients gave other weights: the optimizer's state differs (a resumed "
          "run's optimizer, or the learning rate)";
    }
  }
  out << "likely cause: " << d.cause << "\n";
  d.report = out.str();
  return d;
}

}  // namespace

RunDiff diff_runs(const std::string& run_a, const std::string& run_b) {
  return as_bad_input([&] { return compare_runs(run_a, run_b); });
}

}  // namespace volshard
