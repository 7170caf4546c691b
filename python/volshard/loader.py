"""volshard.Loader: the C++ pipeline (cache, deterministic prefix, MONAI's
DDP-tutorial augmentation, worker threads) as a Python iterable of batches."""

import json
import math
import os

import torch

from . import _volshard
from ._checks import fspath as _fspath, options as _checked_options
from ._volshard import SeedStreams
from .sampler import DistributedSampler


def _is_datalist(data):
    """A path to a datalist .json (else a folder, or a list)."""
    return isinstance(data, (str, os.PathLike)) and os.fspath(data).endswith(".json") \
        and not os.path.isdir(os.fspath(data))


_KEYS = ("image", "label")

# What volshard runs instead of a transform, for the messages that refuse one.
_NO_TRANSFORM = ("volshard's pipeline runs in C++ (by default MONAI's DDP tutorial's: load, channel-first, "
                 "ScaleIntensity, RandCropByPosNegLabel, RandRotate90): set its steps with pipeline= (a dict or a "
                 "config such as configs/spleen.json: orientation, pixdim, intensity, crop_foreground, flip_prob, "
                 "...) and crop=, num_samples=, rot90_prob=; Loader(transform=) runs a transform of your own on each "
                 "crop after it, or keep MONAI's Dataset and DataLoader with sampler=volshard.DistributedSampler(...)")


# The stream a user's transform draws from: SeedStreams(sample_seed(index, epoch)).shared_seed(this, patch_index),
# so it is a function of (seed, epoch, index, patch) only, apart from volshard's own draws (docs/reproducibility.md).
USER_TRANSFORM_PURPOSE = 0x75736572  # "user"

# The batch's entries with one value per row (a crop); "step" and "wait_seconds" are the batch's own.
_ROW_ENTRIES = ("index", "patch_index", "source", "crop_start", "rot90_k", "flipped")


def _transform_rows(batch, transform, keys, streams, epoch):
    """Applies the user's per-sample transform to every row (crop) of a batch:
    a MONAI Randomizable (set_random_state) is reseeded from the row's stream
    and called with the sample; any other callable gets (sample, generator),
    a torch.Generator seeded from that stream. The rows go back together in
    the batch's order; their image and label must keep one shape."""
    image_key, label_key = keys
    monai_like = callable(getattr(transform, "set_random_state", None))
    images, labels = [], []
    for r in range(batch[image_key].shape[0]):
        index, patch = int(batch["index"][r]), int(batch["patch_index"][r])
        seed = SeedStreams(streams.sample_seed(index, epoch)).shared_seed(USER_TRANSFORM_PURPOSE, patch)
        sample = {image_key: batch[image_key][r], label_key: batch[label_key][r]}
        sample.update({k: batch[k][r] for k in _ROW_ENTRIES if k in batch})
        if monai_like:
            transform.set_random_state(seed=seed % (1 << 32))
            out = transform(sample)
        else:
            out = transform(sample, torch.Generator().manual_seed(seed % (1 << 63)))
        if not isinstance(out, dict) or image_key not in out or label_key not in out:
            raise TypeError(f"Loader: transform must return the sample dict with {image_key!r} and {label_key!r} "
                            f"(got {type(out).__name__} for index {index}, patch {patch})")
        images.append(torch.as_tensor(out[image_key]))
        labels.append(torch.as_tensor(out[label_key]))
    for name, rows in ((image_key, images), (label_key, labels)):
        if any(t.shape != rows[0].shape for t in rows):
            raise ValueError(f"Loader: transform gave {name} rows of shapes {sorted({tuple(t.shape) for t in rows})} "
                             f"in one batch: the rows of a batch must keep one shape")
    return dict(batch, **{image_key: torch.stack(images), label_key: torch.stack(labels)})


def _keys(keys, who="Loader", also_taken=()):
    """(image key, label key) from keys=: None (the Decathlon's "image", "label"), two strings as MONAI's
    keys=["img", "seg"], or a mapping {"image": "img", "label": "seg"}."""
    if keys is None:
        return _KEYS
    if isinstance(keys, dict):
        if set(keys) != set(_KEYS):
            raise ValueError(f"{who}: keys={keys!r} must map 'image' and 'label' (and nothing else) to your keys, "
                             f"as {{'image': 'img', 'label': 'seg'}}")
        named = (keys["image"], keys["label"])
    elif isinstance(keys, (list, tuple)) and len(keys) == 2:
        named = tuple(keys)
    else:
        named = None
    if named is None or not all(isinstance(k, str) and k for k in named):
        raise ValueError(f"{who}: keys={keys!r} must be (image key, label key): two strings, as MONAI's "
                         f"keys=['img', 'seg'], or {{'image': 'img', 'label': 'seg'}}")
    if named[0] == named[1]:
        raise ValueError(f"{who}: keys={keys!r}: the image and label keys must differ")
    taken = [e for e in _volshard._batch_entries() if e not in _KEYS] + list(also_taken)
    for k in named:
        if k in taken:
            raise ValueError(f"{who}: keys={keys!r}: '{k}' is the batch's own entry (its entries: "
                             f"{', '.join(taken)}); name the image and label otherwise")
    return named


def _named(batch, keys):
    """The batch's "image" and "label" under keys, in their places."""
    if keys == _KEYS:
        return batch
    names = dict(zip(_KEYS, keys))
    return {names.get(k, k): v for k, v in batch.items()}


def pairs_from_datalist(path, section="training", keys=None):
    """The entries of a MONAI/Decathlon datalist's ``section`` as dicts, paths
    relative to the datalist's folder made whole: ``keys`` names the entries'
    image and label keys (as ``Loader``'s: ("img", "seg") reads a datalist of
    MONAI's DDP tutorial's dicts, and gives them back so). Every file is
    checked: missing ones raise FileNotFoundError, listed."""
    image_key, label_key = _keys(keys, "pairs_from_datalist")
    return _volshard._pairs_from_datalist(_fspath(path, "pairs_from_datalist"), section, image_key, label_key)


def _pairs(data, keys=_KEYS):
    """A folder, a datalist .json, or a list of dicts with the image and label keys or of (image, label)
    pairs."""
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if _is_datalist(path):
            return [(p[keys[0]], p[keys[1]]) for p in _volshard._pairs_from_datalist(path, "training", *keys)]
        return [(p["image"], p["label"]) for p in _volshard.pairs_from_folder(path)]
    if not isinstance(data, (list, tuple)):
        raise TypeError(f"Loader: data must be a folder, a datalist .json, or a list of {{'image', 'label'}} "
                        f"dicts or (image, label) pairs, not a {type(data).__name__} (volshard reads the "
                        f"files itself; a torch Dataset's items are not file pairs)")
    pairs = []
    for k, item in enumerate(data):
        if isinstance(item, dict):
            if keys[0] not in item or keys[1] not in item:
                hint = ""
                if keys == _KEYS and len(item) == 2 and all(isinstance(n, str) for n in item):
                    hint = f"; MONAI's dict keys are read with keys=(image key, label key): keys={tuple(item)!r}?"
                elif keys != _KEYS:
                    hint = f" (keys={keys!r})"
                raise ValueError(f"Loader: data[{k}] has no '{keys[0]}' or '{keys[1]}' key: {item!r}{hint}")
            pairs.append((_fspath(item[keys[0]], "Loader", keys[0]), _fspath(item[keys[1]], "Loader", keys[1])))
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            image, label = item
            pairs.append((_fspath(image, "Loader", "image"), _fspath(label, "Loader", "label")))
        else:
            raise TypeError(f"Loader: data[{k}] must be an {{'image', 'label'}} dict or an (image, label) pair, "
                            f"not {item!r}")
    return pairs


def _split(data, split, val_fraction, keys=_KEYS):
    """Every pair (split=None), or the "training" or "validation" part as
    `volshard train` splits them: a datalist's "validation" list, else the
    last val_fraction of the pairs (at least one) validate."""
    if split is None:
        return _pairs(data, keys)
    if split not in ("training", "validation"):
        raise ValueError(f"split={split!r} must be None, 'training' or 'validation'")
    if _is_datalist(data):
        train, val = _volshard._split_datalist(os.fspath(data), float(val_fraction), *keys)
    else:
        source = os.fspath(data) if isinstance(data, (str, os.PathLike)) else "data"
        train, val = _volshard._hold_out_tail(_pairs(data, keys), float(val_fraction), source)
    return [(p["image"], p["label"]) for p in (train if split == "training" else val)]


# Where batches may be made. Tests add "meta" (tensors without data) to run the GPU path's code on a CPU.
_BATCH_DEVICE_TYPES = ("cpu", "cuda")


def _device(device, name="device"):
    """torch.device or None; a CUDA device where there is none is refused here, not at the first batch."""
    if device is None:
        return None
    d = torch.device(device)
    if d.type not in _BATCH_DEVICE_TYPES:  # meta, say: tensors without data
        raise ValueError(f"Loader: {name}={device!r}: batches are made on the CPU or a CUDA device")
    if d.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"Loader: {name}={device!r}: no CUDA device here (torch {torch.__version__})")
    return d


def _pipeline(pipeline, who):
    """A dict of pipeline keys, or the path of a JSON config whose pipeline keys are taken (its network and
    optimiser keys are `volshard train`'s, known but not the Loader's; any other key is refused, as the CLI
    refuses it). The keys are the C++ schema's (volshard/datasets/feed.h) and the trainer's table's."""
    if pipeline is None:
        return {}
    if not isinstance(pipeline, (str, os.PathLike)):
        return dict(pipeline)  # unknown keys are refused by the schema, naming them and the nearest one
    path = os.fspath(pipeline)
    try:
        with open(path) as f:
            config = json.load(f)
    except OSError as e:
        raise FileNotFoundError(f"{who}: pipeline={path}: {e.strerror}") from None
    except ValueError as e:
        raise ValueError(f"{who}: pipeline={path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{who}: pipeline={path}: must hold a JSON object")
    keys = _volshard._feed_keys()
    train_keys = _volshard._train_config_keys()
    known = train_keys + [k for k in keys if k not in train_keys]  # num_classes: the network sets it there
    for key in config:
        if key not in known:
            # The key the CLI names for the same misspelt flag, or what the known keys are.
            near = _volshard._nearest_key(key, known)
            raise ValueError(f"{who}: pipeline={path}: unknown key '{key}'" +
                             (f" (did you mean '{near}'?)" if near else
                              f": neither a pipeline key ({', '.join(keys)}) nor a key of `volshard train`'s "
                              f"config files (network, optimiser, schedule)"))
    return {k: v for k, v in config.items() if k in keys}


def _json_value(value):
    """A Python value as JSON takes it: numpy and torch scalars and arrays as numbers and lists, paths as
    text, nan and inf as the text the schema reads back ("nan")."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy and torch values, arrays too
        return _json_value(value.tolist())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def _feed_options(crop, num_samples, allow_smaller, rot90_prob, pipeline, who="Loader"):
    """The C++ pipeline's defaults (MONAI's DDP tutorial), then the pipeline's keys, then the arguments
    given, read by the C++ schema."""
    settings = _pipeline(pipeline, who)
    given = {"crop": crop, "num_samples": num_samples, "allow_smaller": allow_smaller, "rot90_prob": rot90_prob}
    settings.update({k: v for k, v in given.items() if v is not None})
    try:
        text = json.dumps({k: _json_value(v) for k, v in settings.items()})
    except TypeError as e:
        raise ValueError(f"{who}: pipeline values must be numbers, strings, booleans or lists of them ({e})") \
            from None
    return _volshard._feed_options(text, f"{who}: ")


class Loader:
    """Batches of one rank, as dicts: ``image`` and ``label`` (float32 tensors,
    (batch_size * num_samples) x C x X x Y x Z, MONAI's list_data_collate
    order), and per row ``index`` (dataset index), ``patch_index``,
    ``source`` (image path), ``crop_start`` (the crop's first voxel in the
    prepared volume), ``rot90_k`` and ``flipped`` (per spatial axis), as
    `volshard train --trace-samples` records them; and ``step``,
    ``wait_seconds``.

    The sampler's indices for the epoch go through the cache (``cache_rate``
    of the items prepared up front: load, channel-first, scale intensity,
    label indices) and RandCropByPosNegLabel(crop, num_samples) +
    RandRotate90(rot90_prob) on ``workers`` C++ threads (0: in ``next``).
    Batches depend on (data, sampler, seed, epoch) only, not on ``workers``.

    ``pipeline`` (a dict, or the path of a JSON config such as
    configs/spleen.json, whose network and optimiser keys are ignored and
    whose other keys, neither the pipeline's nor `volshard train`'s, are
    refused as the CLI refuses them, the nearest key named) sets
    the CT/MRI steps: orientation, pixdim, intensity (scale, range,
    normalize) with a_min/a_max/b_min/b_max/clip or nonzero/channel_wise/
    normalize_on (crop, volume), crop_foreground, spatial_pad, prefix_order (the steps' order), labels (classes,
    brats, decathlon_brats), num_classes,
    crop_kind (pos_neg, spatial), flip_prob, rand_scale, rand_shift (with
    rand_scale_prob, rand_shift_prob), noise_prob/noise_std,
    smooth_prob/smooth_sigma_x/y/z, contrast_prob/contrast_gamma,
    bias_prob/bias_degree/bias_coeff, and
    crop, num_samples, rot90_prob, allow_smaller, which the arguments of the
    same names override when given (defaults: 96, 4, 0.5, False). ``crop``
    is one edge (a cube) or three, (x, y, z): BraTS's (224, 224, 144).
    The GIL is released while C++ works; tensors come without a copy.

    ``split="training"`` or ``"validation"`` takes the part of ``data`` that
    `volshard train` trains or validates on: a datalist's "validation" list,
    or else the last ``val_fraction`` of the pairs (at least one) held out
    (None, the default: every pair). ``volshard.ValidationLoader`` reads the
    validation part as whole volumes.

    ``device`` (None: where the loader made them, the CPU) moves each batch's
    image and label there, the next batch's copy issued before the current
    one is handed out so that it overlaps the step: without blocking from the
    pinned buffers (``pin_memory``, by default on where CUDA is), on a CUDA
    side stream the consumer's stream then waits for (as `volshard train
    --device cuda` feeds its network).

    ``cache_device`` (None: host memory) keeps the cached prefix on that
    device and runs the augmentation there, as tensor ops, from the same
    seed streams: MONAI's CacheDataset + ToDeviced recipe (`volshard train
    --cache-device`). Batches then come out on that device. On the CPU it
    runs the GPU path's code and gives the host path's batches bit for bit.

    ``pipeline`` then holds every pipeline key and its value (a dict, as
    RUN/config.json names them): what this loader feeds.

    ``sampler`` None (the default) makes a ``volshard.DistributedSampler``
    over the pairs taken (after ``split``): shuffled, ``seed`` (default 0),
    rank and world size from torch.distributed; ``loader.sampler`` is it. A
    sampler of your own must be sized for those pairs.

    ``keys`` names the image and label as MONAI's dict transforms do:
    ``("img", "seg")`` (MONAI's ``keys=["img", "seg"]``) or
    ``{"image": "img", "label": "seg"}``. Dicts in ``data`` and the entries of
    a datalist .json are read by those keys, and each batch holds the image
    and label under them (``batch["img"]``) instead of "image" and "label".

    ``transform`` (optional) runs after volshard's pipeline, on each crop in
    the Python thread that iterates: a MONAI transform (anything with
    ``set_random_state``) is reseeded from the crop's own stream and called
    with the sample dict (image, label under ``keys``, and the row's index,
    patch_index, ...); any other callable is called as ``transform(sample,
    generator)`` with a ``torch.Generator`` seeded from that stream. It must
    return the dict with the image and label, one shape for every crop of a
    batch. The stream is ``SeedStreams(SeedStreams(seed).sample_seed(index,
    epoch)).shared_seed(USER_TRANSFORM_PURPOSE, patch_index)``: the same
    crop is transformed alike at any world size and worker count, and
    differently each epoch.

    ``state_dict()`` holds the sampler's state at the batches returned so far
    in this epoch; ``load_state_dict()`` continues after them (same or another
    world size)."""

    _core = None

    def __init__(self, data, sampler=None, *, crop=None, num_samples=None, batch_size=2, workers=2,
                 cache_rate=1.0, seed=None, rot90_prob=None, allow_smaller=None,
                 drop_last_batch=False, prefetch_batches=2, pin_memory=None, cache_threads=2,
                 max_cache_bytes=-1, cache_dir="", pipeline=None, split=None, val_fraction=0.2,
                 device=None, cache_device=None, keys=None, transform=None):
        if transform is not None and not callable(transform):
            raise TypeError(f"Loader: transform={type(transform).__name__} is not callable")
        self.transform = transform
        self.keys = _keys(keys)
        self.device = _device(device)
        cache_device = _device(cache_device, "cache_device")
        pairs = _split(data, split, val_fraction, self.keys)
        if sampler is None:
            sampler = DistributedSampler(len(pairs), seed=0 if seed is None else seed)
        if not isinstance(sampler, DistributedSampler):
            hint = (f" (a transform? pass it as transform=, after volshard's own pipeline: {_NO_TRANSFORM})"
                    if callable(sampler) else "")
            raise TypeError(f"Loader: sampler must be a volshard.DistributedSampler, not {type(sampler).__name__}"
                            f"{hint}")
        size = sampler.dataset if isinstance(sampler.dataset, int) else len(sampler.dataset)
        if size != len(pairs):
            taken = "data" if split is None else f"split={split!r} of data"
            raise ValueError(f"Loader: the sampler's dataset has {size} items but {taken} has {len(pairs)}: "
                             f"pass sampler=None and the Loader makes one over those {len(pairs)} "
                             f"(loader.sampler), or size yours for them")
        if seed is None:
            seed = sampler.seed
        self.seed = int(seed)
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last_batch = drop_last_batch
        self._pid = os.getpid()
        self._generation = 0
        # The C++ checks name each field by its key (num_samples=0), as the arguments here.
        feed = _feed_options(crop, num_samples, allow_smaller, rot90_prob, pipeline)
        # Every pipeline key, as RUN/config.json names them: what this loader feeds.
        self.pipeline = json.loads(feed.to_json())
        self._core = _volshard._LoaderCore(
            pairs,
            feed,
            _checked_options(_volshard._LoaderOptions, "Loader", batch_size=batch_size, drop_last_batch=drop_last_batch,
                              workers=workers, prefetch_batches=prefetch_batches, seed=self.seed % (1 << 64),
                              pin_memory=pin_memory, device=cache_device),
            _checked_options(_volshard._CacheOptions, "Loader", cache_rate=cache_rate, threads=cache_threads,
                              max_bytes=max_cache_bytes, cache_dir=_fspath(cache_dir, "Loader", "cache_dir"),
                              device=cache_device))

    def set_epoch(self, epoch):
        """Sets the sampler's epoch (its shuffle) and the augmentation's (each
        sample's seed stream): call it before every epoch, as with torch's
        DistributedSampler."""
        self.sampler.set_epoch(epoch)

    @property
    def epoch(self):
        return self.sampler.epoch

    def __len__(self):
        """Batches of this rank's epoch, as torch's DataLoader: also after
        load_state_dict (the sampler then yields only the rest of its epoch)."""
        s = self.sampler
        size, world = (s.dataset if isinstance(s.dataset, int) else len(s.dataset)), s.num_replicas
        if s.mode == "pad":
            n = -(-size // world)
        elif s.mode == "drop_last":
            n = size // world
        else:  # uneven: rank r takes r, r + W, ...
            n = size // world + (1 if s.rank < size % world else 0)
        return n // self.batch_size if self.drop_last_batch else -(-n // self.batch_size)

    def _check_process(self):
        if os.getpid() != self._pid:
            raise RuntimeError(f"Loader: created in process {self._pid}, used in process {os.getpid()} (a fork): "
                               f"its C++ threads did not come along; create the Loader in the process that "
                               f"iterates it (in a DataLoader worker, in worker_init_fn)")

    def __iter__(self):
        self._check_process()
        # One stream of batches per Loader: a newer iter() takes it over, and
        # the older iterator says so instead of silently sharing it.
        self._generation += 1
        generation = self._generation
        indices = list(self.sampler)
        streams = SeedStreams(self.seed % (1 << 64)) if self.transform is not None else None
        epoch = self.sampler.epoch
        keys = self.keys

        def transformed(batch):  # the user's transform on a batch under self.keys
            return batch if streams is None else _transform_rows(batch, self.transform, keys, streams, epoch)

        def on_host(batch):  # the same on a batch under the C++ names, before its copy to the device
            out = transformed(_named(batch, keys))
            return {"image": out[keys[0]], "label": out[keys[1]]}

        if self.device is not None:
            # Batches to the device one ahead, as `volshard train` takes them (C++ BatchesAhead): the next
            # batch is taken, transformed on the host and its copy issued (non_blocking; on a side stream for
            # CUDA) before this one is handed out.
            self._core.to_device(str(self.device), on_host if streams is not None else None)
        self._core.start_epoch(indices, epoch)
        self.sampler._set_consumed(0)
        returned = 0
        while True:
            if generation != self._generation:
                raise RuntimeError("Loader: this iterator was superseded by a newer iter(loader), which restarted "
                                   "the epoch's stream; iterate one at a time (make a Loader per stream)")
            self._check_process()
            batch = self._core.next()
            if batch is None:
                return
            batch = _named(batch, keys)
            if self.device is None:
                batch = transformed(batch)
            returned = min(returned + self.batch_size, len(indices))
            self.sampler._set_consumed(returned)
            yield batch

    def state_dict(self):
        """Where this rank stands: the sampler's state after the batches returned
        so far in this epoch, the epoch and the seed (a dict for torch.save)."""
        return {"sampler": self.sampler.state_dict(), "epoch": self.sampler.epoch, "seed": self.seed}

    def load_state_dict(self, state):
        """Continues after the batches `state` had returned, at this or another
        world size (elastic); the seed must be the state's. len() stays the
        batches of a whole epoch."""
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
