#pragma once
// The JSON-lines files of a run (metrics.jsonl, fingerprints.jsonl, a trace),
// read as repro and diff read them.

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

namespace volshard {

/// Each line of `path` that is a JSON object, in order; a torn line (what a
/// killed writer leaves) is skipped, and a missing file reads as no lines.
inline std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) rows.push_back(std::move(j));
  }
  return rows;
}

}  // namespace volshard
