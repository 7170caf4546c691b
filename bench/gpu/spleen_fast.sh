#!/usr/bin/env bash
# The spleen fast-training recipe against MONAI's own on the same GPU (bench/gpu/spleen_fast.py),
# run by scripts/gpu/run.sh on the GPU machine with BUILD, PYTHON and OUT set. Here, a dry run:
#   BUILD=build PYTHON=$(scripts/pyenv.sh --path)/bin/python DEVICE=cpu QUICK=1 bash bench/gpu/spleen_fast.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
args=(--bin "$BUILD/bin/volshard" --out "${OUT:-.gpu/out}/spleen_fast" --device "${DEVICE:-cuda}")
[[ -n "${QUICK:-}" ]] && args+=(--quick)
"${PYTHON:-python3}" bench/gpu/spleen_fast.py "${args[@]}"
