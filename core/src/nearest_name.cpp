#include "volshard/core/nearest_name.h"

#include <algorithm>
#include <cctype>

#include "volshard/core/field.h"

namespace volshard {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string nearest_name(const std::string& word, const std::vector<std::string>& names,
                         size_t max_distance) {
  std::string nearest;
  size_t best = word.size();
  for (const std::string& name : names) {
    const size_t d = edit_distance(word, name);
    if (d < best) best = d, nearest = name;
  }
  return best <= max_distance ? nearest : std::string();
}

std::string nearest_key(const std::string& key, const std::vector<std::string>& keys) {
  // Compared as flags, so that the threshold and the "closer than the word"
  // bound are the command line's (tools/volshard: unknown_flag_message).
  const auto flag = [](const std::string& k) { return Field(k.c_str(), "").flag(); };
  std::vector<std::string> flags;
  flags.reserve(keys.size());
  for (const std::string& k : keys) flags.push_back(flag(k));
  const std::string word = flag(key);
  const std::string nearest = nearest_name(word, flags, std::max<size_t>(2, word.size() / 4));
  if (nearest.empty()) return "";
  return keys[static_cast<size_t>(std::find(flags.begin(), flags.end(), nearest) - flags.begin())];
}

std::string unknown_flag_message(const std::string& word, const std::vector<std::string>& known) {
  const std::string flag = word.substr(0, word.find('='));
  std::string message = "unknown flag " + flag;
  const std::string nearest = nearest_name(flag, known, std::max<size_t>(2, flag.size() / 4));
  if (!nearest.empty()) message += "; did you mean " + nearest + "?";
  return message;
}

std::string nearest_choice(const std::string& value, const std::vector<std::string>& choices) {
  return nearest_name(value, choices, std::max<size_t>(2, value.size() / 3));
}

std::string choice_message(const std::string& value, const std::vector<std::string>& choices) {
  std::string listed;
  for (const std::string& c : choices) listed += (listed.empty() ? "" : ", ") + c;
  std::string message = value + " is not one of " + listed;
  const std::string nearest = nearest_choice(value, choices);
  if (!nearest.empty()) message += "; did you mean " + nearest + "?";
  return message;
}

std::string ascii_lower(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace volshard
