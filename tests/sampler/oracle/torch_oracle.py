"""What PyTorch's and MONAI's DistributedSampler yield, computed by PyTorch itself.

mode "pad" and "drop_last" are torch.utils.data.DistributedSampler with
drop_last False/True (MONAI's even_divisible=True is the same class). mode
"uneven" is MONAI's even_divisible=False: MONAI is not packaged for Debian, so
its constructor's adjustment (documented in MONAI's monai/data/samplers.py) is
applied to torch's sampler here, and torch's own __iter__ does the rest.
"""
import math

import torch
from torch.utils.data import DistributedSampler


class _Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def torch_shard(n, world_size, rank, seed, epoch, mode="pad", shuffle=True):
    """Rank `rank`'s indices for the epoch, as a list of ints."""
    if mode == "uneven" and n < world_size:
        raise ValueError("the dataset length is less than the number of participating ranks.")
    sampler = DistributedSampler(_Sized(n), num_replicas=world_size, rank=rank,
                                 shuffle=shuffle, seed=seed, drop_last=(mode == "drop_last"))
    if mode == "uneven":
        # MONAI even_divisible=False: the last `extra` ranks read one fewer and
        # the order is not padded (total_size = n).
        extra = sampler.total_size - n
        if rank + extra >= world_size:
            sampler.num_samples -= 1
        sampler.total_size = n
    sampler.set_epoch(epoch)
    return list(iter(sampler))


def all_shards(n, world_size, seed, epoch, mode="pad", shuffle=True):
    return [torch_shard(n, world_size, r, seed, epoch, mode, shuffle) for r in range(world_size)]


def num_samples(n, world_size, mode):
    if mode == "drop_last" and n % world_size:
        return math.ceil((n - world_size) / world_size)
    return math.ceil(n / world_size)
