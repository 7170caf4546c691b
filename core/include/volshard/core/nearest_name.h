#pragma once
// The name a misspelt one was meant to be: "unknown flag --pixdims; did you
// mean --pixdim?". Std only.

#include <cstddef>
#include <string>
#include <vector>

namespace volshard {

/// Levenshtein distance: insertions, deletions and substitutions cost 1.
size_t edit_distance(const std::string& a, const std::string& b);

/// The name of `names` nearest to `word` (the first at the least distance,
/// closer than the word's length) when it is at most `max_distance` edits
/// away, else "".
std::string nearest_name(const std::string& word, const std::vector<std::string>& names,
                         size_t max_distance);

/// The key of an options table (core/field.h) nearest to a misspelt `key`, by
/// the rule the command line names the nearest flag with: the flags of the
/// keys compared ("--pixdims" against "--pixdim"), at most max(2, flag
/// length / 4) edits apart. "" when none is that close. For a config file's
/// or a Python pipeline's keys, so that they name the key the flag would.
std::string nearest_key(const std::string& key, const std::vector<std::string>& keys);

/// "unknown flag --szie; did you mean --size?" for `word` (a flag, with
/// "=value" or not) among `known` flags: the nearest at most max(2, length /
/// 4) edits away. Every command names an unknown flag so.
std::string unknown_flag_message(const std::string& word, const std::vector<std::string>& known);

/// The choice nearest to `value`, a value that must be one of `choices`, at
/// most max(2, length / 3) edits away, else "".
std::string nearest_choice(const std::string& value, const std::vector<std::string>& choices);

/// "softmx is not one of sigmoid, softmax; did you mean softmax?": a value
/// that must be one of `choices`, with the nearest (nearest_choice).
std::string choice_message(const std::string& value, const std::vector<std::string>& choices);

/// `name` in lower case (ASCII): an enum's name as its flag and a config take it, in any case.
std::string ascii_lower(std::string name);

}  // namespace volshard
