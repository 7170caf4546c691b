"""Seeds for PyTorch DataLoader worker processes."""

import random

import torch

from . import _volshard
from .sampler import _world


class WorkerInit:
    """A ``worker_init_fn`` for torch.utils.data.DataLoader: worker w of rank r
    seeds torch, ``random`` and numpy (if present) with
    ``SeedStreams(seed).worker_seed(r, w, epoch)``, so every (rank, worker)
    has its own stream and a rerun gets the same ones. ``epoch`` is the
    sampler's when the workers start (pass ``sampler``), else 0."""

    def __init__(self, seed=0, rank=None, sampler=None):
        self.seed = int(seed)
        self.rank = _world()[1] if rank is None else int(rank)
        self.sampler = sampler

    def __getstate__(self):  # spawned workers get the epoch, not the sampler
        state = dict(self.__dict__)
        state["epoch"] = self.sampler.epoch if self.sampler is not None else 0
        state["sampler"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def epoch(self):
        if self.sampler is not None:
            return self.sampler.epoch
        return getattr(self, "__dict__").get("epoch", 0)

    def worker_seed(self, worker_id):
        return _volshard.SeedStreams(self.seed & ((1 << 64) - 1)).worker_seed(self.rank, worker_id,
                                                                               self.epoch())

    def __call__(self, worker_id):
        s = self.worker_seed(worker_id)
        torch.manual_seed(s)
        random.seed(s)
        try:
            import numpy
        except ImportError:
            return
        numpy.random.seed(s % (1 << 32))


def worker_init_fn(seed=0, rank=None, sampler=None):
    """``DataLoader(..., worker_init_fn=volshard.worker_init_fn(seed, sampler=sampler))``."""
    return WorkerInit(seed, rank, sampler)
