#include "python_verb.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#ifndef VOLSHARD_DEFAULT_PYTHON
#define VOLSHARD_DEFAULT_PYTHON ""
#endif

namespace volshard::cli {

namespace {

std::string interpreter() {
  const char* env = std::getenv("VOLSHARD_PYTHON");
  if (env != nullptr && *env != '\0') return env;
  const std::string configured = VOLSHARD_DEFAULT_PYTHON;
  if (!configured.empty() && ::access(configured.c_str(), X_OK) == 0) return configured;
  return "python3";
}

// build/bin/volshard -> build/python, when the package is there (with the
// audit the build copies beside the compiled module).
void put_module_beside_on_path(const char* argv0) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) self = std::filesystem::absolute(argv0, ec);
  const std::filesystem::path package = self.parent_path().parent_path() / "python";
  if (!std::filesystem::exists(package / "volshard" / "audit" / "__main__.py", ec)) return;
  const char* old = std::getenv("PYTHONPATH");
  std::string value = package.string();
  if (old != nullptr && *old != '\0') value += std::string(":") + old;
  ::setenv("PYTHONPATH", value.c_str(), 1);
}

}  // namespace

int exec_python_verb(const char* verb, int argc, char** argv) {
  const std::string python = interpreter();
  const std::string module = std::string("volshard.") + verb;
  put_module_beside_on_path(argv[0]);
  std::vector<char*> args{const_cast<char*>(python.c_str()), const_cast<char*>("-m"),
                          const_cast<char*>(module.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execvp(python.c_str(), args.data());
  std::cerr << "volshard " << verb << ": runs 'python -m " << module << "', but " << python
            << " could not be started: " << std::strerror(errno)
            << " (set VOLSHARD_PYTHON to an interpreter with torch)\n";
  return 2;
}

}  // namespace volshard::cli
