#include "volshard/trainer/diff.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "json_lines.h"
#include "resume.h"
#include "volshard/core/file_io.h"
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

Run read_run(const std::string& dir) {
  Run r;
  r.dir = dir;
  const fs::path config = fs::path(dir) / "config.json";
  if (!fs::exists(config))
    throw std::invalid_argument("diff: " + dir + " is not a run folder (no config.json)");
  r.config = read_text_file(config.string());
  const json c = json::parse(r.config, nullptr, false);
  if (!c.is_object()) throw std::invalid_argument("diff: " + config.string() + ": not valid JSON");
  r.invariant = c.value("invariant", false);
  r.trace = c.value("trace_samples", std::string());
  const fs::path prints = fs::path(dir) / "fingerprints.jsonl";
  if (!fs::exists(prints))
    throw std::invalid_argument("diff: " + prints.string() +
                                " is missing (a run with --no-fingerprints, or from before "
                                "fingerprints): nothing to compare step by step");
  for (const json& j : read_json_lines(prints.string())) {
    if (j.value("type", "") == "layout") r.layout = j.value("buckets", json::array());
    if (j.value("type", "") == "step") r.steps[j.value("step", int64_t{0})] = j;
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
    if (j.value("step", int64_t{-1}) != step) continue;
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

}  // namespace

RunDiff diff_runs(const std::string& run_a, const std::string& run_b) {
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
    if (it == b.steps.end()) break;
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
  const bool models_equal = no_models || (fs::exists(ma) && fs::exists(mb) &&
                                          read_file(ma.string()) == read_file(mb.string()));
  if (d.first_step < 0) {
    out << "every common step's fingerprints are equal; model.pt "
        << (no_models      ? "in neither run"
            : models_equal ? "equal"
                           : "DIFFERS")
        << "\n";
    d.identical = options.empty() && models_equal && a.steps.size() == b.steps.size();
    d.cause = d.identical ? "none: the runs are the same"
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

}  // namespace volshard
