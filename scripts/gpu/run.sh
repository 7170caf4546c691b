#!/usr/bin/env bash
# There (the GPU machine, one `device run` with `carry: [".gpu"]`): builds
# volshard against that machine's own torch 2.11 (CUDA, NCCL), then, inside 8
# minutes (BUDGET seconds, default 465, so that a failed first call leaves a
# session's device time for a second), in the order of what matters most:
# the tests that need a GPU, the GPU benchmarks, the rest of the suite with
# the time left. Each stage is bounded by `timeout`, so a slow one cannot take
# the others' time or the logs. Logs, a summary and the benchmarks' metrics
# (bench_runs.tar.gz, hippocampus_run.tar.gz) go to $OUT (or .gpu/out): seven files. A second call on
# the same warm machine finds the build made and reuses it; STAGES picks what
# runs after the build (default: "gpu-tests bench hippocampus rest").
# Prepare here first with scripts/gpu/prepare.sh.
#
#   bash scripts/gpu/run.sh                 build, test, bench
#   PYTHON=$(scripts/pyenv.sh --path)/bin/python bash scripts/gpu/run.sh --dry-run
#                                           here, without a GPU: the same configure against the
#                                           unpacked packages, a few targets built and tested, and
#                                           with DRY_BUILD=build (a build made here) every GPU
#                                           benchmark small on the CPU (DEVICE=cpu QUICK=1)
#
# Environment: COMMIT (what the summary names; the tree travels without .git), PYTHON (default: python3, the one with torch there), JOBS (default: nproc),
# BUDGET (seconds for the whole script, default 465), BUILD_CAP (seconds the build may take, default 200),
# GPU_TESTS_CAP (default 150: python_module_pytest outran 100 s there), HIPPOCAMPUS_CAP (default 180),
# AFTER_BUILD (a script to run once built),
# VOLSHARD_GPU_TESTS (a ctest -R regex of the tests that need a GPU, run first).
# Stage times on one H100 (2026-11-27): configure 30 s, build 92 s, the C++ GPU tests 20 s and
# python_module_pytest over 100 s, train_step 118 s, spleen_fast 94 s, the Hippocampus recipe about
# 4 minutes for its 190 epochs (78 in 116 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dry_run=0
[[ "${1:-}" == "--dry-run" ]] && dry_run=1
out=${OUT:-$root/.gpu/out}
mkdir -p "$out"
python=${PYTHON:-python3}
jobs=${JOBS:-$(nproc)}
# What the run makes lives beside .gpu, not in it: a call's `carry` replaces .gpu there, so a build
# under it would be lost (and the packages unpacked anew, newer than the objects) before a warm
# machine's second call could reuse it, as it was on 2026-11-27.
state=$root/.gpu-state
build=$state/build
prefix=$state/prefix
summary=$out/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
budget=${BUDGET:-465}
((dry_run)) && budget=${BUDGET:-100000}  # here, on 2 cores, the build takes what it takes
stages=" ${STAGES:-gpu-tests bench hippocampus rest} "
stage() { [[ "$stages" == *" $1 "* ]]; }
# left CAP: the seconds a stage may take, at most CAP, keeping 15 s to write the summary.
left() { local l=$((budget - $(elapsed) - 15)); ((l > $1)) && l=$1; ((l < 1)) && l=1; echo $l; }

say "gpu run: $(date -u +%FT%TZ), commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")}$( [[ -n "$(git status --porcelain 2>/dev/null)" ]] && echo ' (with uncommitted changes)')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' | tee -a "$summary"
work=$state/work  # what the benchmarks write (data, runs); $OUT gets their tables and metrics
rm -rf "$work"
mkdir -p "$work"
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else '-')" >"$work/torch.txt" 2>&1 ||
  { cat "$work/torch.txt"; say "gpu: $python cannot import torch (set PYTHON)"; exit 2; }
tee -a "$summary" <"$work/torch.txt"

# The carried Debian packages, unpacked (not installed) into a prefix.
ls .gpu/debs/*.deb >/dev/null 2>&1 || { say "gpu: no .gpu/debs: run scripts/gpu/prepare.sh here and carry .gpu"; exit 2; }
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
# Unpacked once: unpacking again would make the headers newer than the build that used them.
if [[ ! -e "$prefix/.unpacked" ]]; then
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for deb in .gpu/debs/*.deb; do unpack "$deb" || { say "gpu: cannot unpack $deb"; exit 2; }; done
  # A -dev package's link (libz.so -> libz.so.1.2.13) whose library package did not travel points
  # at the machine's own library of that soname, which the binaries then load.
  for link in "$prefix"/usr/lib/*-linux-gnu/*.so; do
    [[ -L "$link" && ! -e "$link" ]] || continue
    name=$(basename "$link")
    mine=$(ls /usr/lib/x86_64-linux-gnu/"$name".[0-9]* /lib/x86_64-linux-gnu/"$name".[0-9]* 2>/dev/null | head -1)
    if [[ -n "$mine" ]]; then ln -sf "$mine" "$link"; else rm -f "$link"; fi
  done
  touch "$prefix/.unpacked"
fi
libdir=$(ls -d "$prefix"/usr/lib/*-linux-gnu 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The carried wheels (MONAI for the baselines, nibabel for the
# end-to-end tests), unpacked beside the packages.
pylib=$state/pylib
rm -rf "$pylib"
mkdir -p "$pylib"
for wheel in .gpu/wheels/*.whl; do
  [[ -e "$wheel" ]] && "$python" -m zipfile -e "$wheel" "$pylib"
done
export PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c "import monai, nibabel; print('monai', monai.__version__, 'nibabel', nibabel.__version__)" 2>&1 | tail -1 | sed 's/^/gpu: /' | tee -a "$summary"

torch_prefix=$("$python" -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_PREFIX_PATH=$prefix/usr;$torch_prefix" "-DCMAKE_LIBRARY_PATH=$libdir"
  "-DVOLSHARD_PYTHON=$(command -v "$python")" -DVOLSHARD_BUILD_FUZZ=OFF
  -DVOLSHARD_BUILD_BENCH=OFF)  # the CPU benchmarks need nifti_clib, which does not travel
say "gpu: configure ($(elapsed) s)"
[[ -e "$build/CMakeCache.txt" ]] && cmake_args=(-B "$build")  # a second call: the configured build
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
# -k 0: a file that fails to compile there leaves every target that does not need it built and tested.
timeout "$(left "${BUILD_CAP:-200}")" cmake --build "$build" -j "$jobs" ${targets[@]:+--target "${targets[@]}"} -- -k 0 \
  >"$out/build.log" 2>&1
build_rc=$?
if ((build_rc != 0)); then
  grep -m20 -B2 -A8 "error" "$out/build.log" | tee -a "$summary"
  say "gpu: build rc $build_rc ($(elapsed) s); going on with what was built"
  ((dry_run)) || [[ -x "$build/bin/volshard" ]] || { say "gpu: no volshard binary: nothing to run"; exit 1; }
else
  say "gpu: built ($(elapsed) s)"
fi
# How the binaries link libstdc++ (pytorch#133437: it must come before LibTorch; LinkOrderTest).
cxx=$(grep -m1 '^CMAKE_CXX_COMPILER:' "$build/CMakeCache.txt" | cut -d= -f2-)
say "gpu: compiler $cxx, libstdc++ $("$cxx" -print-file-name=libstdc++.so.6)"
[[ -x "$build/bin/datasets_tests" ]] &&
  say "gpu: datasets_tests needs $(readelf -d "$build/bin/datasets_tests" | grep -o 'NEEDED.*' | head -4 | grep -o '\[.*\]' | tr '\n' ' ')"

if ((dry_run)); then
  (cd "$build" && ctest -j "$jobs" -R "^(VolumeIo|Gzip|NiftiHeader|DistributedSampler)" --output-on-failure) \
    >"$out/ctest.log" 2>&1
  rc=$?
  tail -3 "$out/ctest.log" | tee -a "$summary"
  # The benchmarks as the GPU run calls them, small on the CPU, with a build made here.
  if [[ -n "${DRY_BUILD:-}" ]]; then
    for b in bench/gpu/*.sh; do
      say "gpu: $b, quick on the CPU with $DRY_BUILD ($(elapsed) s)"
      BUILD="$DRY_BUILD" PYTHON="$python" OUT="$work/bench" DEVICE=cpu QUICK=1 bash "$b" >>"$summary" 2>&1 ||
        { say "gpu: $b failed"; rc=1; }
    done
  fi
  say "gpu: dry run done in $(elapsed) s (rc $rc)"
  exit $rc
fi

# A look at this machine first, where AFTER_BUILD names a script (bounded to 60 s).
if [[ -n "${AFTER_BUILD:-}" ]]; then
  say "gpu: $AFTER_BUILD ($(elapsed) s)"
  OUT="$out" timeout "$(left 60)" bash "$AFTER_BUILD" >/dev/null 2>&1
fi

# First the tests that need a GPU (they skip without one): CUDA training, the cache and batches on the
# GPU, pinned copies, the side stream, NCCL, AMP, the Python suite's CUDA cases and the binaries on
# the GPU (train_end_to_end_GpuTest).
# (Not the wheel's suite: `pip wheel .` needs a package registry, which that machine lacks.)
rc=0
gpu_tests=${VOLSHARD_GPU_TESTS:-LinkOrder|Cuda|Gpu|Nccl|Pin|OnADevice|MovesSamples|BatchesAhead|Determin|Amp|GraphedStep|Upsample|python_module}
stage gpu-tests && { (cd "$build" && timeout "$(left "${GPU_TESTS_CAP:-150}")" ctest -j "$jobs" -R "$gpu_tests" -E python_wheel -LE "fuzz|package" --timeout 300 \
  --output-on-failure) >"$out/ctest_gpu.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Skipped|\*\*\*Timeout|Not Run" "$out/ctest_gpu.log" | tail -40 | tee -a "$summary"
say "gpu: GPU tests rc $rc ($(elapsed) s)"; }

# GPU benchmarks: each bench/gpu/*.sh prints its table (the step's rows first).
shopt -s nullglob
benches=(bench/gpu/train_step.sh bench/gpu/spleen_fast.sh)
if ((${#benches[@]} == 0)); then
  say "gpu: no GPU benchmarks in bench/gpu/ yet"
fi
stage bench || benches=()
for b in "${benches[@]}"; do
  say "gpu: $b ($(elapsed) s)"
  cap=150
  [[ "$b" == *spleen* ]] && cap=110
  BUILD="$build" PYTHON="$python" OUT="$work/bench" timeout "$(left $cap)" bash "$b" 2>&1 | tee -a "$summary"
done
# The runs' metrics and tables (no volumes): at most 8 files come back from $OUT.
stage bench && (cd "$work" && find bench -name '*.md' -o -name 'metrics.jsonl' -o -name 'config.json' | tar -czf "$out/bench_runs.tar.gz" -T -)

# The Decathlon's Hippocampus recipe (configs/hippocampus.json, 2 ranks over Gloo on the one GPU) where
# prepare.sh copied it: Dice and wall time beside the CPU figure (#44). Bounded by HIPPOCAMPUS_CAP (180 s); a
# run the bound stops still prints the validations it reached, from its metrics.
data=.gpu/data/msd_hippocampus
if stage hippocampus; then
  if [[ -e "$data/dataset.json" ]]; then
    say "gpu: hippocampus on the GPU ($(elapsed) s)"
    hout=$work/hippocampus
    timeout "$(left "${HIPPOCAMPUS_CAP:-180}")" "$python" bench/hippocampus.py --bin "$build/bin/volshard" --data "$data" \
      --out "$hout" --nproc 2 -- --device cuda 2>&1 | grep -v "^\$ " | tee -a "$summary"
    "$python" - "$hout/run/metrics.jsonl" <<'PY' 2>&1 | tee -a "$summary"
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1])]
except OSError:
    sys.exit("gpu: hippocampus wrote no metrics")
epochs = [r for r in rows if r.get("type") == "epoch"]
val = [r for r in epochs if r.get("val_dice") is not None]
print(f"gpu: hippocampus metrics: {len(epochs)} epochs, validations " +
      ", ".join(f"{r['epoch'] + 1}: {r['val_dice']:.4f}" for r in val))
PY
    (cd "$work" && find hippocampus -name 'metrics.jsonl' -o -name 'config.json' -o -name 'train.log' |
      tar -czf "$out/hippocampus_run.tar.gz" -T -)
  else
    say "gpu: hippocampus skipped: no $data (scripts/gpu/prepare.sh copies it where ../shared has it)"
  fi
fi

# The rest of the suite with the time left (a stopped run says which tests it did not reach).
stage rest || { say "gpu: done in $(elapsed) s"; exit $rc; }
say "gpu: the rest of the suite ($(elapsed) s)"
(cd "$build" && timeout "$(left 600)" ctest -j "$jobs" -E "$gpu_tests|python_wheel" -LE "fuzz|package" --timeout 300 \
  --output-on-failure) >"$out/ctest.log" 2>&1
rest_rc=$?
grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Timeout|Not Run" "$out/ctest.log" | tail -40 | tee -a "$summary"
grep -c "Skipped" "$out/ctest.log" | sed 's/^/gpu: skipped tests: /' | tee -a "$summary"
say "gpu: rest of the suite rc $rest_rc; done in $(elapsed) s"
((rc == 0)) && rc=$rest_rc
exit $rc
