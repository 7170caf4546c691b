#!/usr/bin/env bash
# Here (Debian 12, with apt): what the GPU machine needs besides the working
# tree. That machine has torch 2.11 (CUDA 13, NCCL), nvcc, CMake, ninja and a
# compiler, but no package registry, and at most 64 MiB travel with a call. So
# the Debian -dev packages volshard builds with travel as .deb files in .gpu/
# (ignored by git; name it in the call's `carry`), and scripts/gpu/run.sh there
# unpacks them into a prefix (dpkg -x, nothing installed). OpenCV does not
# travel (its Debian dependencies are hundreds of MB): that build reads no 2D
# images, which the GPU path does not need.
#
#   scripts/gpu/prepare.sh          writes .gpu/debs/*.deb and .gpu/wheels/{monai,nibabel}-*.whl, prints their size,
#                                   and copies ../shared/data/msd_hippocampus to .gpu/data (20 MB) where it is
#                                   here (run.sh's hippocampus stage; ../shared does not travel)
set -euo pipefail
cd "$(dirname "$0")/../.."

# Headers and the libraries volume_io links: the rest comes with torch.
packages=(
  libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev librapidcheck-dev
  libgloo-dev
  libdeflate-dev libdeflate0 libisal-dev libisal2 zlib1g-dev
)

mkdir -p .gpu/debs
rm -f .gpu/debs/*.deb
(cd .gpu/debs && apt-get download -q "${packages[@]}" >/dev/null)
bytes=$(du -cb .gpu/debs/*.deb | tail -1 | cut -f1)
echo "gpu: $(ls .gpu/debs/*.deb | wc -l) packages in .gpu/debs, $((bytes / 1024)) KiB (with the tree: 64 MiB at most)"
# MONAI (the benchmarks' baselines) and nibabel (the end-to-end tests' oracle), pure Python, at
# the versions the project pins; numpy and the rest are on that machine already.
python=$(scripts/pyenv.sh --path)/bin/python
mkdir -p .gpu/wheels
rm -f .gpu/wheels/*.whl
for pin in $(grep -E '^(monai|nibabel)==' scripts/requirements.txt); do
  "$python" -m pip download -q --no-deps --only-binary=:all: -d .gpu/wheels "$pin" >/dev/null
done
echo "gpu: $(ls .gpu/wheels) in .gpu/wheels"
bytes=$((bytes + $(du -cb .gpu/wheels/*.whl | tail -1 | cut -f1)))
if ((bytes > 32 * 1024 * 1024)); then
  echo "gpu: .gpu/debs is over 32 MiB: leave room for the working tree" >&2
  exit 1
fi
# The Decathlon's Hippocampus (real MRI, 20 MB) for the same recipe on the GPU (run.sh's hippocampus
# stage): ../shared beside the clone does not travel, a folder under .gpu does.
hippocampus=../shared/data/msd_hippocampus
rm -rf .gpu/data
if [[ -e "$hippocampus/dataset.json" ]]; then
  mkdir -p .gpu/data/msd_hippocampus
  cp -r "$hippocampus"/dataset.json "$hippocampus"/imagesTr "$hippocampus"/labelsTr .gpu/data/msd_hippocampus/
  echo "gpu: $(du -sh .gpu/data | cut -f1) of Hippocampus in .gpu/data"
else
  echo "gpu: $hippocampus is absent: the hippocampus stage will skip"
fi
echo "gpu: .gpu is $(du -sh .gpu | cut -f1) (with the tree: 64 MiB at most)"
