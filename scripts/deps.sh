#!/usr/bin/env bash
# Installs every Debian package volshard needs, idempotently: apt-get runs only
# when a package is missing. Works as root, or through sudo otherwise.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache lld pkg-config git
  # sampler, tools, tests, benchmarks
  libcli11-dev nlohmann-json3-dev libspdlog-dev
  libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
  # tensors, volumes, pictures
  libtorch-dev libgloo-dev libniftiio-dev libnifti2-dev libznz-dev zlib1g-dev libdeflate-dev libisal-dev libopencv-dev
  clang libclang-rt-14-dev
  # LibTorch's libblas.so.3 is the single-threaded reference BLAS unless this
  # takes over the alternative (see docs/platform notes in README)
  libopenblas0-openmp
  # oracles for golden and differential tests
  python3 python3-numpy python3-torch python3-nibabel
  # the Python module (python/) and its tests
  pybind11-dev python3-dev python3-pytest
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
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
