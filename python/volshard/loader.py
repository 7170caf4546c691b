"""volshard.Loader: the C++ pipeline (cache, deterministic prefix, MONAI's
DDP-tutorial augmentation, worker threads) as a Python iterable of batches."""

import os

from . import _volshard
from .sampler import DistributedSampler, _volshard_options


def _pairs(data):
    """A folder, a datalist .json, or a list of {"image", "label"} dicts or (image, label) pairs."""
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if path.endswith(".json"):
            return [(p["image"], p["label"]) for p in _volshard.pairs_from_datalist(path)]
        return [(p["image"], p["label"]) for p in _volshard.pairs_from_folder(path)]
    pairs = []
    for k, item in enumerate(data):
        if isinstance(item, dict):
            if "image" not in item or "label" not in item:
                raise ValueError(f"Loader: data[{k}] has no 'image' or 'label' key: {item!r}")
            pairs.append((os.fspath(item["image"]), os.fspath(item["label"])))
        else:
            image, label = item
            pairs.append((os.fspath(image), os.fspath(label)))
    return pairs


def _edge(crop):
    if isinstance(crop, int):
        return crop
    edges = tuple(crop)
    if len(edges) != 3 or len(set(edges)) != 1:
        raise ValueError(f"Loader: crop={edges} must be an int or three equal ints (cubic crops)")
    return int(edges[0])


class Loader:
    """Batches of one rank, as dicts: ``image`` and ``label`` (float32 tensors,
    (batch_size * num_samples) x C x X x Y x Z, MONAI's list_data_collate
    order), and per row ``index`` (dataset index), ``patch_index``,
    ``source`` (image path); and ``step``, ``wait_seconds``.

    The sampler's indices for the epoch go through the cache (``cache_rate``
    of the items prepared up front: load, channel-first, scale intensity,
    label indices) and RandCropByPosNegLabel(crop, num_samples) +
    RandRotate90(rot90_prob) on ``workers`` C++ threads (0: in ``next``).
    Batches depend on (data, sampler, seed, epoch) only, not on ``workers``.
    The GIL is released while C++ works; tensors come without a copy.

    ``state_dict()`` holds the sampler's state at the batches returned so far
    in this epoch; ``load_state_dict()`` continues after them (same or another
    world size)."""

    _core = None

    def __init__(self, data, sampler=None, *, crop=96, num_samples=4, batch_size=2, workers=2,
                 cache_rate=1.0, seed=None, rot90_prob=0.5, allow_smaller=False,
                 drop_last_batch=False, prefetch_batches=2, pin_memory=None, cache_threads=2,
                 max_cache_bytes=-1, cache_dir=""):
        pairs = _pairs(data)
        if sampler is None:
            sampler = DistributedSampler(len(pairs), seed=0 if seed is None else seed)
        if not isinstance(sampler, DistributedSampler):
            raise TypeError(f"Loader: sampler must be a volshard.DistributedSampler, not {type(sampler).__name__}")
        size = sampler.dataset if isinstance(sampler.dataset, int) else len(sampler.dataset)
        if size != len(pairs):
            raise ValueError(f"Loader: the sampler's dataset has {size} items but data has {len(pairs)}")
        if seed is None:
            seed = sampler.seed
        self.seed = int(seed)
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last_batch = drop_last_batch
        self._core = _volshard._LoaderCore(
            pairs,
            _volshard_options(_volshard._FeedOptions, crop=_edge(crop), num_samples=num_samples,
                              allow_smaller=allow_smaller, rot90_prob=rot90_prob),
            _volshard_options(_volshard._LoaderOptions, batch_size=batch_size, drop_last_batch=drop_last_batch,
                              workers=workers, prefetch_batches=prefetch_batches, seed=self.seed,
                              pin_memory=pin_memory),
            _volshard_options(_volshard._CacheOptions, cache_rate=cache_rate, threads=cache_threads,
                              max_bytes=max_cache_bytes, cache_dir=os.fspath(cache_dir)))

    def set_epoch(self, epoch):
        self.sampler.set_epoch(epoch)

    @property
    def epoch(self):
        return self.sampler.epoch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last_batch else -(-n // self.batch_size)

    def __iter__(self):
        indices = list(self.sampler)
        self._core.start_epoch(indices, self.sampler.epoch)
        self.sampler._set_consumed(0)
        returned = 0
        while True:
            batch = self._core.next()
            if batch is None:
                return
            returned = min(returned + self.batch_size, len(indices))
            self.sampler._set_consumed(returned)
            yield batch

    def state_dict(self):
        return {"sampler": self.sampler.state_dict(), "epoch": self.sampler.epoch, "seed": self.seed}

    def load_state_dict(self, state):
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"Loader: the state was saved with seed={state['seed']} but this loader "
                             f"augments with seed={self.seed}; build it with seed={state['seed']}")
        self.sampler.load_state_dict(state["sampler"])

    @property
    def cached_items(self):
        return self._core.cached_items

    def close(self):
        """Stops the worker threads; the loader cannot be used after it."""
        if self._core is not None:
            self._core.close()

    def __del__(self):
        self.close()
