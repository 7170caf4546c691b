"""volshard.DistributedSampler: torch's DistributedSampler (plus MONAI's
even_divisible) over the C++ sampler, resumable mid-epoch at any world size."""

import json

import torch.distributed as dist
from torch.utils.data import Sampler

from . import _volshard
from ._checks import options as _checked_options

_UINT64 = (1 << 64) - 1


def _volshard_options(cls, **fields):
    """A C++ options struct with these fields set (the rest keep their defaults)."""
    return _checked_options(cls, "DistributedSampler", **fields)


def _world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class DistributedSampler(Sampler):
    """torch.utils.data.DistributedSampler's signature and indices, plus MONAI's
    ``even_divisible``: False gives every index once, ranks r < n % W one more
    (it overrides ``drop_last``). ``dataset`` is a sized object or an int.
    ``num_replicas`` and ``rank`` default to torch.distributed's when it is
    initialised, else 1 and 0.

    ``state_dict()`` counts the indices this sampler has yielded in the epoch
    (every rank is assumed to have read as many); ``load_state_dict()``
    continues that epoch from there, also with another num_replicas, and the
    saved seed, shuffle and mode replace this sampler's. Iterating twice
    without ``set_epoch`` in between reads the same order and warns once;
    ``auto_advance_epoch=True`` starts the next epoch instead.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False, even_divisible=True, auto_advance_epoch=False):
        world, me = _world()
        self.num_replicas = world if num_replicas is None else num_replicas
        self.rank = me if rank is None else rank
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        size = dataset if isinstance(dataset, int) else len(dataset)
        mode = "uneven" if not even_divisible else ("drop_last" if drop_last else "pad")
        self._core = _volshard._DistributedSampler(_volshard_options(
            _volshard._DistributedSamplerOptions, dataset_size=size, num_replicas=self.num_replicas,
            rank=self.rank, shuffle=bool(shuffle), seed=int(seed) & _UINT64, mode=mode,
            auto_advance_epoch=bool(auto_advance_epoch)))
        self._yielded = 0

    @property
    def epoch(self):
        return self._core.epoch

    @property
    def mode(self):
        """"pad", "drop_last" or "uneven"."""
        return self._core.mode

    @property
    def num_samples(self):
        return self._core.num_samples

    @property
    def total_size(self):
        return self._core.total_size

    def set_epoch(self, epoch):
        self._core.set_epoch(epoch)
        self._yielded = 0

    def __len__(self):
        return self._core.num_samples

    def __iter__(self):
        indices = self._core.iterate()
        self._yielded = 0
        for i in indices:
            self._yielded += 1
            yield i

    def _set_consumed(self, rank_samples):
        """For loaders that know better than the yield count (prefetching)."""
        self._yielded = rank_samples

    def state_dict(self):
        """Plain values (torchdata's Stateful protocol): seed, epoch, mode,
        shuffle, dataset_size, world_size and consumed (positions of the
        epoch's permutation read by all ranks together)."""
        self._core.set_position(min(self._yielded, self._core.num_samples))
        return json.loads(self._core.state_json())

    def load_state_dict(self, state):
        self._core = _volshard._DistributedSampler.restore(json.dumps(state), self.rank,
                                                           self.num_replicas)
        self._yielded = 0
