#!/usr/bin/env python3
"""Writes golden_torch.json: per-rank indices from PyTorch's DistributedSampler.

Made with Debian's PyTorch 1.13; the pinned environment's torch 2.11 writes the
same 3025 cases (checked 2026-11-24; only "torch_version" differs):
    $(scripts/pyenv.sh --path)/bin/python tests/sampler/oracle/make_golden.py > tests/sampler/oracle/golden_torch.json
"""
import itertools
import json
import sys

import torch

from torch_oracle import all_shards

SIZES = [0, 1, 2, 5, 7, 10, 21, 64, 129]
WORLD_SIZES = [1, 2, 3, 4, 8]
MODES = ["pad", "drop_last", "uneven"]
SEEDS = [0, 1, 42, 2**31 - 1, 2**32 - 1, 2**32, 2**32 + 5, 2**63 + 7]
EPOCHS = [0, 1, 3]


def main():
    cases = []
    for n, w, mode in itertools.product(SIZES, WORLD_SIZES, MODES):
        if mode == "uneven" and n < w:
            continue  # MONAI raises; covered by an error test
        for shuffle in (True, False):
            seeds = SEEDS if shuffle else [0]
            epochs = EPOCHS if shuffle else [0]
            for seed, epoch in itertools.product(seeds, epochs):
                cases.append({"size": n, "world_size": w, "mode": mode, "shuffle": shuffle,
                              "seed": seed, "epoch": epoch,
                              "shards": all_shards(n, w, seed, epoch, mode, shuffle)})
    json.dump({"torch_version": torch.__version__, "cases": cases}, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
