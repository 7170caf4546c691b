#pragma once
// Where the std-only libraries send warnings. Default: one line on stderr.
// Thread-safe.

#include <functional>
#include <string>

namespace volshard {

using WarningHandler = std::function<void(const std::string& message)>;

/// Replaces the handler; an empty handler restores the default. Returns the old one.
WarningHandler set_warning_handler(WarningHandler handler);

/// Sends one warning to the current handler.
void warn(const std::string& message);

}  // namespace volshard
