"""The command-line tools that `pip install` puts on PATH.

The wheel carries the tools the build makes (`volshard`, `volshard-torch` and
`sampler-inspect`, in volshard/bin/); `[project.scripts]` in pyproject.toml
names the two entry points below. Each replaces this process with its tool,
arguments untouched, after two things only the installed environment knows:
- torch's own libraries (site-packages/torch/lib, found without importing
  torch) go first on LD_LIBRARY_PATH, so `volshard-torch` links the torch of
  this environment wherever pip put it;
- `volshard audit` runs this interpreter (VOLSHARD_PYTHON, unless set).
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _exec(name: str) -> int:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    if not os.access(exe, os.X_OK):
        sys.stderr.write(
            f"{name}: {exe} is missing: this volshard package has no command-line tools "
            f"(they come with `pip install .`; in a source tree, run build/bin/{name})\n")
        return 2
    env = dict(os.environ)
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        lib = os.path.join(list(spec.submodule_search_locations)[0], "lib")
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = lib + (os.pathsep + old if old else "")
    env.setdefault("VOLSHARD_PYTHON", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(exe, [name] + sys.argv[1:], env)
    return 2  # not reached: execve replaces this process or raises OSError


def volshard() -> int:
    """`volshard ...`: every subcommand (train, predict, preview, diff, synth, audit, ...)."""
    return _exec("volshard")


def sampler_inspect() -> int:
    """`sampler-inspect ...`: the sampler's shards, without LibTorch."""
    return _exec("sampler-inspect")
