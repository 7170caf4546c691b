#!/usr/bin/env python3
"""Baseline for bench_sampler: one rank's indices from PyTorch's DistributedSampler.

Prints "seconds extra_peak_bytes" for list(DistributedSampler(...)) at epoch 0,
the peak measured over the resident size after `import torch`.
"""
import resource
import sys
import time

import torch  # noqa: F401  (imported before the memory baseline)
from torch.utils.data import DistributedSampler


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def main():
    n, world, rank = (int(a) for a in sys.argv[1:4])
    before = rss_bytes()
    t0 = time.perf_counter()
    indices = list(DistributedSampler(Sized(n), num_replicas=world, rank=rank, shuffle=True, seed=0))
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert len(indices) == -(-n // world)
    print(seconds, peak - before)


if __name__ == "__main__":
    main()
