#!/usr/bin/env bash
# Installs every Debian package volshard needs, idempotently: apt-get runs only
# when a package is missing. Works as root, or through sudo otherwise. Then
# makes the pinned Python environment (torch 2.11, MONAI, nibabel; scripts/pyenv.sh)
# whose LibTorch the project builds against.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache lld pkg-config git
  # sampler, tools, tests, benchmarks
  libcli11-dev nlohmann-json3-dev libspdlog-dev
  libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
  # volumes, pictures; LibTorch itself comes from the pinned torch wheel (scripts/pyenv.sh),
  # which ships no Gloo headers: c10d's ProcessGroupGloo.hpp includes them
  libgloo-dev libniftiio-dev libnifti2-dev libznz-dev zlib1g-dev libdeflate-dev libisal-dev libopencv-dev
  clang libclang-rt-14-dev
  # the interpreter of the pinned environment (torch, MONAI, nibabel, pytest: scripts/requirements.txt)
  # and its headers for the Python module
  python3 python3-venv python3-dev
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

here=$(cd "$(dirname "$0")" && pwd)
if ((${#missing[@]} == 0)); then
  echo "deps: all ${#packages[@]} packages present"
  exec "$here/pyenv.sh"
fi

echo "deps: installing ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "deps: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
"${apt[@]}" update -q
"${apt[@]}" install -y -q --no-install-recommends "${missing[@]}"
exec "$here/pyenv.sh"
