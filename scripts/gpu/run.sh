#!/usr/bin/env bash
# There (the GPU machine, one `device run` with `carry: [".gpu"]`): builds
# volshard against that machine's own torch 2.11 (CUDA, NCCL), runs the tests
# with CUDA present, then the GPU benchmarks, inside the 10 minutes of a call.
# Logs and a summary go to $OUT (or .gpu/out). Prepare here first with
# scripts/gpu/prepare.sh.
#
#   bash scripts/gpu/run.sh                 build, test, bench
#   PYTHON=$(scripts/pyenv.sh --path)/bin/python bash scripts/gpu/run.sh --dry-run
#                                           here, without a GPU: the same configure against the
#                                           unpacked packages, a few targets built and tested
#
# Environment: PYTHON (default: python3, the one with torch there), JOBS (default: nproc),
# VOLSHARD_GPU_TESTS (a ctest -R regex; default: every test but the fuzzer and package ones).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dry_run=0
[[ "${1:-}" == "--dry-run" ]] && dry_run=1
out=${OUT:-$root/.gpu/out}
mkdir -p "$out"
python=${PYTHON:-python3}
jobs=${JOBS:-$(nproc)}
build=$root/.gpu/build
prefix=$root/.gpu/prefix
summary=$out/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }

say "gpu run: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$( [[ -n "$(git status --porcelain 2>/dev/null)" ]] && echo ' (with uncommitted changes)')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' | tee -a "$summary"
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else '-')" >"$out/torch.txt" 2>&1 ||
  { cat "$out/torch.txt"; say "gpu: $python cannot import torch (set PYTHON)"; exit 2; }
tee -a "$summary" <"$out/torch.txt"

# The carried Debian packages, unpacked (not installed) into a prefix.
ls .gpu/debs/*.deb >/dev/null 2>&1 || { say "gpu: no .gpu/debs: run scripts/gpu/prepare.sh here and carry .gpu"; exit 2; }
rm -rf "$prefix"
mkdir -p "$prefix"
unpack() {  # dpkg-deb where there is one, else the .deb's data member through ar and tar
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$prefix"
  else
    local member
    member=$(ar t "$1" | grep '^data\.tar') || return 1
    case "$member" in
      *.xz) ar p "$1" "$member" | xz -dc | tar -x -C "$prefix" -f - ;;
      *.zst) ar p "$1" "$member" | zstd -dc | tar -x -C "$prefix" -f - ;;
      *.gz) ar p "$1" "$member" | gzip -dc | tar -x -C "$prefix" -f - ;;
      *) ar p "$1" "$member" | tar -x -C "$prefix" -f - ;;
    esac
  fi
}
for deb in .gpu/debs/*.deb; do unpack "$deb" || { say "gpu: cannot unpack $deb"; exit 2; }; done
libdir=$(ls -d "$prefix"/usr/lib/*-linux-gnu 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

torch_prefix=$("$python" -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_PREFIX_PATH=$prefix/usr;$torch_prefix" "-DCMAKE_LIBRARY_PATH=$libdir"
  "-DVOLSHARD_PYTHON=$(command -v "$python")" -DVOLSHARD_BUILD_FUZZ=OFF)
say "gpu: configure ($(elapsed) s)"
cmake "${cmake_args[@]}" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; say "gpu: configure failed"; exit 1; }
grep "volshard:" "$out/configure.log" | tee -a "$summary"
# Every package must come from the prefix, not from whatever the machine has.
for var in VOLSHARD_DEFLATE_LIBRARY VOLSHARD_ISAL_LIBRARY GTest_DIR rapidcheck_DIR CLI11_DIR nlohmann_json_DIR; do
  value=$(grep "^$var:" "$build/CMakeCache.txt" | cut -d= -f2-)
  say "gpu: $var=$value"
done

targets=()
if ((dry_run)); then
  targets=(volume_io_tests sampler_tests)
fi
say "gpu: build ${targets[*]:-all} with $jobs jobs ($(elapsed) s)"
cmake --build "$build" -j "$jobs" ${targets[@]:+--target "${targets[@]}"} >"$out/build.log" 2>&1 ||
  { grep -m20 -B2 -A8 "error" "$out/build.log"; say "gpu: build failed"; exit 1; }
say "gpu: built ($(elapsed) s)"

if ((dry_run)); then
  (cd "$build" && ctest -j "$jobs" -R "^(VolumeIo|Gzip|NiftiHeader|DistributedSampler)" --output-on-failure) \
    >"$out/ctest.log" 2>&1
  rc=$?
  tail -3 "$out/ctest.log" | tee -a "$summary"
  say "gpu: dry run done in $(elapsed) s (rc $rc)"
  exit $rc
fi

# The whole suite with CUDA present; the GPU tests run instead of skipping.
tests=${VOLSHARD_GPU_TESTS:-.}
(cd "$build" && ctest -j "$jobs" -R "$tests" -LE "fuzz|package" --timeout 600 --output-on-failure) \
  >"$out/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Skipped|Not Run" "$out/ctest.log" | tail -40 | tee -a "$summary"
grep -c "Skipped" "$out/ctest.log" | sed 's/^/gpu: skipped tests: /' | tee -a "$summary"
say "gpu: tests rc $rc ($(elapsed) s)"

# The carried wheels (MONAI, for the baselines), unpacked beside the packages.
pylib=$root/.gpu/pylib
rm -rf "$pylib"
mkdir -p "$pylib"
for wheel in .gpu/wheels/*.whl; do
  [[ -e "$wheel" ]] && "$python" -m zipfile -e "$wheel" "$pylib"
done
export PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c "import monai; print('monai', monai.__version__)" 2>&1 | tail -1 | sed 's/^/gpu: /' | tee -a "$summary"

# GPU benchmarks: each bench/gpu/*.sh prints its table.
shopt -s nullglob
benches=(bench/gpu/*.sh)
if ((${#benches[@]} == 0)); then
  say "gpu: no GPU benchmarks in bench/gpu/ yet"
fi
for b in "${benches[@]}"; do
  say "gpu: $b ($(elapsed) s)"
  BUILD="$build" PYTHON="$python" OUT="$out" bash "$b" 2>&1 | tee -a "$summary"
done
say "gpu: done in $(elapsed) s"
exit $rc
