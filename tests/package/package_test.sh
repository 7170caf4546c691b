#!/bin/bash
# volshard used from another project: `cmake --install` into a temporary
# prefix, then tiny consumers configured and built against it
#   sampler_consumer   find_package(volshard COMPONENTS sampler), LibTorch hidden
#   datasets_consumer  find_package(volshard COMPONENTS datasets), with LibTorch
#   subdir_consumer    add_subdirectory(volshard) with nothing turned off
# Usage: package_test.sh CMAKE BUILD_DIR SOURCE_DIR WITH_TORCH(ON|OFF) [TORCH_DIR]
# (TORCH_DIR: the folder of TorchConfig.cmake, as a consumer passes it.)
set -euo pipefail
cmake=$1 build=$2 src=$3 with_torch=$4 torch_dir=${5:-}
tmp=$(mktemp -d /tmp/volshard_package.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
step() { echo "== $*"; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

step "install into $tmp/prefix"
"$cmake" --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
for f in lib/cmake/volshard/volshardConfig.cmake lib/cmake/volshard/volshardConfigVersion.cmake \
         include/volshard/sampler/distributed_sampler.h bin/volshard; do
  test -e "$tmp/prefix/$f" || { echo "not installed: $f"; exit 1; }
done

step "sampler_consumer: find_package(volshard COMPONENTS sampler) with LibTorch hidden"
"$cmake" -S "$src/tests/package/sampler_consumer" -B "$tmp/sampler" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON --no-warn-unused-cli >"$tmp/sampler.log"
"$cmake" --build "$tmp/sampler" -j 2 >>"$tmp/sampler.log" || { cat "$tmp/sampler.log"; exit 1; }
"$tmp/sampler/sampler_consumer"

if [ "$with_torch" = ON ]; then
  step "datasets_consumer: find_package(volshard COMPONENTS datasets) with LibTorch"
  "$cmake" -S "$src/tests/package/datasets_consumer" -B "$tmp/datasets" "${generator[@]}" \
    -DCMAKE_PREFIX_PATH="$tmp/prefix" ${torch_dir:+-DTorch_DIR="$torch_dir"} >"$tmp/datasets.log"
  "$cmake" --build "$tmp/datasets" -j 2 >>"$tmp/datasets.log" || { cat "$tmp/datasets.log"; exit 1; }
  "$tmp/datasets/datasets_consumer" "$tmp/data"
  "$tmp/prefix/bin/volshard" info "$tmp/data/img0.nii.gz" >/dev/null
fi

step "subdir_consumer: add_subdirectory(volshard), defaults only"
"$cmake" -S "$src/tests/package/subdir_consumer" -B "$tmp/subdir" "${generator[@]}" \
  -DVOLSHARD_SOURCE_DIR="$src" >"$tmp/subdir.log" || { cat "$tmp/subdir.log"; exit 1; }
"$cmake" --build "$tmp/subdir" -j 2 >>"$tmp/subdir.log" || { cat "$tmp/subdir.log"; exit 1; }
"$tmp/subdir/subdir_consumer"
echo "package test: ok"
