#pragma once
// Verbs the Python module implements (`volshard audit ...` is `python -m
// volshard.audit ...`): the light `volshard` replaces itself with that
// interpreter, arguments unchanged, so that both spellings are one program.

namespace volshard::cli {

/// Replaces this process with `PYTHON -m volshard.<verb> argv[2:]...`. PYTHON is
/// $VOLSHARD_PYTHON when set, else the interpreter the build was configured
/// with (CMake's VOLSHARD_PYTHON) when it exists, else python3 from PATH. When
/// the module built beside this executable exists (bin/../python/volshard, as
/// `make python` writes it), that folder goes first on PYTHONPATH. Returns 2,
/// with the reason on stderr, only if the interpreter could not be started.
int exec_python_verb(const char* verb, int argc, char** argv);

}  // namespace volshard::cli
