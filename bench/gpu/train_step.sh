#!/usr/bin/env bash
# The GPU issue's training figures (bench/gpu/train_step.py: step time against MONAI's UNet in
# PyTorch, data wait, the cache on the GPU, samples/s at 128^3, two ranks on one GPU), run by
# scripts/gpu/run.sh on the GPU machine with BUILD (its build folder), PYTHON and OUT set.
# Here, a dry run on the CPU at small sizes:
#   BUILD=build PYTHON=$(scripts/pyenv.sh --path)/bin/python DEVICE=cpu QUICK=1 bash bench/gpu/train_step.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
args=(--bin "$BUILD/bin/volshard" --out "${OUT:-.gpu/out}/train_step" --device "${DEVICE:-cuda}")
[[ -n "${QUICK:-}" ]] && args+=(--quick)
"${PYTHON:-python3}" bench/gpu/train_step.py "${args[@]}"
