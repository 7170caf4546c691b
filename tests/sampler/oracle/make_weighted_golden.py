#!/usr/bin/env python3
"""Prints the golden draws pinned in tests/sampler/weighted_sampler_test.cpp.

The pins are PyTorch 1.13's (Debian's python3-torch), and stay so: volshard
draws as 1.13's multinomial does (sampler/weighted_sampler.h). Run with the
pinned torch 2.11, this prints the same draws for 11 of the 14 cases; the
three with num_samples == 1 differ, because torch 2.x draws a single sample
by another kernel (checked 2026-11-24):
    cd tests/sampler/oracle && $(../../../scripts/pyenv.sh --path)/bin/python make_weighted_golden.py

MONAI is not packaged for Debian, so its DistributedWeightedRandomSampler.__iter__
(monai/data/samplers.py, MONAI 1.4) is emulated in monai_weighted_shard() on
top of torch's DistributedSampler (torch_oracle.torch_shard); the draws
themselves are torch.multinomial's. volshard seeds a fresh generator with
generator_seed + epoch for every epoch; MONAI's generator would keep running.
"""
import torch

from torch_oracle import torch_shard

MODES = {"pad": "kPad", "drop_last": "kDropLast", "uneven": "kUneven"}


def weights_of(kind, n):
    """Weight formulas whose doubles C++ computes identically (weights_of in the test)."""
    if kind == "linear":  # i + 1
        return [float(i + 1) for i in range(n)]
    if kind == "reciprocal":  # 1 / (i + 1): full mantissas, inexact running sums
        return [1.0 / (i + 1) for i in range(n)]
    if kind == "sparse":  # zeros at multiples of 3, else (i % 5) + 0.5
        return [0.0 if i % 3 == 0 else (i % 5) + 0.5 for i in range(n)]
    raise ValueError(kind)


def monai_weighted_shard(n, world_size, rank, seed, epoch, mode, shuffle, weights,
                         num_samples_per_rank, generator_seed):
    """MONAI's __iter__: draw from the rank's shard with torch.multinomial."""
    indices = torch_shard(n, world_size, rank, seed, epoch, mode, shuffle)
    k = len(indices) if num_samples_per_rank == -1 else num_samples_per_rank
    generator = torch.Generator().manual_seed(generator_seed + epoch)
    w = torch.as_tensor([weights[i] for i in indices], dtype=torch.double)
    rand = torch.multinomial(w, k, True, generator=generator)
    return [indices[i] for i in rand.tolist()]


# (n, world_size, mode, shuffle, seed, generator_seed, epoch, num_samples_per_rank, weights)
SAMPLER_CASES = [
    (5, 2, "pad", False, 0, 0, 0, -1, "linear"),
    (5, 2, "pad", False, 0, 123, 0, 5, "linear"),
    (10, 3, "pad", True, 0, 7, 0, -1, "reciprocal"),
    (10, 3, "pad", True, 0, 7, 1, -1, "reciprocal"),
    (10, 3, "pad", True, 0, 7, 2, 6, "reciprocal"),
    (21, 4, "uneven", True, 42, 2**32 + 5, 3, -1, "sparse"),
    (21, 4, "drop_last", False, 0, 99, 0, 1, "reciprocal"),
    (13, 2, "pad", True, 2**31 - 1, 1, 0, 1, "linear"),
    (30, 1, "pad", False, 0, 2024, 0, 12, "sparse"),
    (64, 8, "pad", True, 5, 31337, 4, 16, "reciprocal"),
]

# (n, weights, generator seed, successive num_samples on one generator):
# torch.multinomial itself, no MONAI glue.
MULTINOMIAL_CASES = [
    (7, "reciprocal", 0, [1, 1, 3]),
    (12, "sparse", 17, [5, 2]),
    (1, "linear", 3, [4]),
    (40, "reciprocal", 2**32 - 1, [9, 1, 60]),
]


def cpp_list(values):
    return "{" + ", ".join(str(v) for v in values) + "}"


def main():
    print(f"// torch {torch.__version__}")
    print("// n, W, mode, shuffle, seed, generator_seed, epoch, num_samples_per_rank, weights, shards")
    for n, w, mode, shuffle, seed, gseed, epoch, k, kind in SAMPLER_CASES:
        shards = [monai_weighted_shard(n, w, r, seed, epoch, mode, shuffle, weights_of(kind, n), k, gseed)
                  for r in range(w)]
        print(f"    {{{n}, {w}, PartitionMode::{MODES[mode]}, {str(shuffle).lower()}, {seed}u, "
              f"{gseed}u, {epoch}, {k}, \"{kind}\", {{{', '.join(cpp_list(s) for s in shards)}}}}},")
    print("// n, weights, generator seed, draws of successive calls")
    for n, kind, gseed, counts in MULTINOMIAL_CASES:
        generator = torch.Generator().manual_seed(gseed)
        w = torch.tensor(weights_of(kind, n), dtype=torch.double)
        calls = [torch.multinomial(w, k, True, generator=generator).tolist() for k in counts]
        print(f"    {{{n}, \"{kind}\", {gseed}u, {{{', '.join(cpp_list(c) for c in calls)}}}}},")


if __name__ == "__main__":
    main()
