#!/usr/bin/env bash
# The module as a user installs it: `pip wheel .` builds a wheel against the
# torch of the interpreter that runs pip, a fresh venv installs it, and the
# Python suite runs there with `python -m pytest` from outside the source tree
# (so `import volshard` is the installed package, not build/python), and the
# command-line tools the wheel puts on the venv's PATH run a small job end to
# end (synth, a 2-rank train, predict, diff, sampler-inspect, audit's help).
# The fresh venv sees the pinned environment's site-packages through a .pth
# file (torch 2.11, numpy, nibabel, pytest: a user's environment with torch),
# so nothing is downloaded; the build runs without isolation for the same
# reason (`pip install .` with isolation fetches scikit-build-core from PyPI).
# The build tree is WORK_DIR.build (kept, so a rerun is incremental); pip's own
# default is a temporary one, never the source tree's build/.
# Usage: wheel_test.sh PYTHON SOURCE_DIR WORK_DIR VOLSHARD_BIN
set -euo pipefail
python=$1 src=$2 work=$3 bin=$4
rm -rf "$work" && mkdir -p "$work"
site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")

echo "== pip wheel $src (against $("$python" -c 'import torch; print(torch.__version__)'))"
(cd "$src" && "$python" -m pip wheel --no-build-isolation --no-deps -q -w "$work/wheelhouse" \
  --config-settings=build-dir="$work.build" . \
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

echo "== the command-line tools from the wheel, on the venv's PATH"
tools="$work/venv/bin"
test -x "$tools/volshard" && test -x "$tools/sampler-inspect"
for f in volshard volshard-torch sampler-inspect; do
  # shellcheck disable=SC2086
  test -x "$("$work/venv/bin/python" -c "import os, volshard; print(os.path.dirname(volshard.__file__))")/bin/$f"
done
job="$work/job"
env -u PYTHONPATH PATH="$tools:/usr/bin:/bin" bash -euo pipefail -c "
  volshard --version
  sampler-inspect --size 12 --world-size 2 --epochs 0:1 --batch-size 2 --verify
  volshard synth --out '$job/data' --count 6 --size 32 --seed 0
  volshard train --data '$job/data' --out '$job/run' --epochs 1 --nproc-per-node 2 --crop 16 \\
    --num-samples 2 --batch-size 2 --val-fraction 0.34 --seed 0 --channels 4,8 --strides 2
  test -s '$job/run/model.pt'
  volshard predict --model '$job/run/model.pt' --config '$job/run/config.json' \\
    --image '$job/data/img5.nii.gz' --out '$job/pred5.nii.gz' --roi 16
  volshard info '$job/pred5.nii.gz'
  volshard diff '$job/run' '$job/run'
  volshard audit --help | head -3
"
echo "wheel tools: ok"
