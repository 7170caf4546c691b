#!/usr/bin/env bash
# The module as a user installs it: `pip wheel .` builds a wheel against the
# torch of the interpreter that runs pip, a fresh venv installs it, and the
# Python suite runs there with `python -m pytest` from outside the source tree
# (so `import volshard` is the installed package, not build/python).
# The fresh venv sees the pinned environment's site-packages through a .pth
# file (torch 2.11, numpy, nibabel, pytest: a user's environment with torch),
# so nothing is downloaded; the build runs without isolation for the same
# reason (`pip install .` with isolation fetches scikit-build-core from PyPI).
# Usage: wheel_test.sh PYTHON SOURCE_DIR WORK_DIR VOLSHARD_BIN
set -euo pipefail
python=$1 src=$2 work=$3 bin=$4
rm -rf "$work" && mkdir -p "$work"
site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")

echo "== pip wheel $src (against $("$python" -c 'import torch; print(torch.__version__)'))"
(cd "$src" && "$python" -m pip wheel --no-build-isolation --no-deps -q -w "$work/wheelhouse" . \
  >"$work/wheel.log" 2>&1) || { tail -40 "$work/wheel.log"; exit 1; }
ls "$work"/wheelhouse/volshard-*.whl

echo "== a fresh venv installs it"
base=$("$python" -c "import sys; print(sys._base_executable)")
"$base" -m venv "$work/venv"
venv_site=$("$work/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$site" >"$venv_site/torch_environment.pth"
"$work/venv/bin/python" -m pip install -q --no-deps --no-index "$work"/wheelhouse/volshard-*.whl

echo "== import volshard from $work and python -m pytest"
cd "$work"
env -u PYTHONPATH "$work/venv/bin/python" -c \
  "import volshard, volshard.audit, os; p = volshard.__file__; print('volshard', volshard.__version__, 'from', p); assert p.startswith('$work/venv/') and volshard.audit.__file__.startswith('$work/venv/')"
env -u PYTHONPATH VOLSHARD_BIN="$bin" PYTHONDONTWRITEBYTECODE=1 \
  "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$src/tests/python"
