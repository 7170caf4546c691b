#!/usr/bin/env bash
# The pinned Python environment (scripts/requirements.txt: torch 2.11, MONAI,
# nibabel, numpy, pytest, pybind11, scikit-build-core), made once per machine
# outside the clone, in a cache folder keyed by the pins' hash, so that a second
# clone and CI on the same machine reuse it. Its torch is the LibTorch the
# project builds against and the oracle the tests compare with.
#
#   scripts/pyenv.sh           make it when missing (unattended), then print nothing more
#   scripts/pyenv.sh --path    print its folder (the Makefile passes <folder>/bin/python to CMake)
#
# VOLSHARD_PYENV_ROOT moves the cache (default: ${XDG_CACHE_HOME:-~/.cache}/volshard).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
requirements="$here/requirements.txt"
key=$(sha256sum "$requirements" | cut -c1-12)
root=${VOLSHARD_PYENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/volshard}
env_dir="$root/pyenv-$key"

if [[ "${1:-}" == "--path" ]]; then
  echo "$env_dir"
  exit 0
fi

mkdir -p "$root"
# Two clones making it at once: the second waits for the first, then finds it made.
exec 9>"$root/.pyenv-$key.lock"
flock 9

# The stamp is written last: a killed install is redone, never half used.
if [[ -f "$env_dir/.complete" ]]; then
  echo "deps: Python environment $env_dir"
  exit 0
fi

python=/usr/bin/python3
echo "deps: making the pinned Python environment $env_dir (pip installs about 4.7 GB: torch is a CUDA build)"
start=$(date +%s)
rm -rf "$env_dir"
"$python" -m venv "$env_dir"
"$env_dir/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$requirements"
"$env_dir/bin/python" -c "import torch, monai, nibabel, numpy, pytest" >/dev/null
touch "$env_dir/.complete"
echo "deps: Python environment made in $(( $(date +%s) - start )) s"
