#pragma once
// synth writes into a folder that may hold an earlier run: files it will
// rewrite are fine (make demo reruns it), files it would leave beside its own
// would mix two data sets and are refused by name.

#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>

#include "volshard/core/error.h"
#include "volshard/core/field.h"

namespace volshard::detail {

/// Throws std::invalid_argument naming up to three files of `folder` that are
/// not in `written` (names relative to `folder`); `what` says which run.
inline void refuse_leftovers(const std::string& folder, const std::set<std::string>& written,
                             const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return;
  std::set<std::string> left;
  for (auto it = fs::recursive_directory_iterator(folder, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec)) continue;
    const std::string name = fs::relative(it->path(), folder, ec).string();
    if (written.count(name) == 0) left.insert(name);
  }
  if (left.empty()) return;
  std::string names;
  int shown = 0;
  for (const std::string& name : left) {
    if (shown++ == 3) break;
    names += (names.empty() ? "" : ", ") + printable(name);
  }
  throw FieldError("synth: " + field_ref("out") + "=" + printable(folder) + " already holds " +
                   names +
                   (left.size() > 3 ? " and " + std::to_string(left.size() - 3) + " more" : "") +
                   ", which " + what +
                   " would not replace: the folder would mix two data sets; use an "
                   "empty folder or remove them");
}

}  // namespace volshard::detail
