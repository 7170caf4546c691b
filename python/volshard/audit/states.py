"""What the audit hashes: samples (fingerprint) and the states of the
generators a process holds (Python's, numpy's and torch's global ones, and
those a dataset reaches, MONAI's Randomizable.R included), named by their path
from the dataset."""

import collections
import functools
import hashlib
import itertools
import json
import numbers
import os
import random

import torch

try:
    import numpy as np
except ImportError:  # torch runs without numpy; so does the audit
    np = None

_MAX_CHILDREN = 64  # items of a list or dict walked when looking for generators
_MAX_DEPTH = 8
_MAX_OBJECTS = 4096


def _digest(*parts):
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(p)
    return h.hexdigest()


# Keys of MONAI's bookkeeping that hold ids (memory addresses) and so differ
# from run to run without the data differing.
_SKIPPED_KEYS = ("applied_operations", "id")


def _fingerprint_into(h, x, depth=0):
    """Feeds x's arrays, tensors, numbers and strings into h, in a fixed order.
    Objects without a stable form (functions, arbitrary instances) add their
    type's name only: their repr holds addresses."""
    if depth > 12:
        return
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if type(t) is not torch.Tensor:
            t = t.as_subclass(torch.Tensor)  # MetaTensor: the data, not its metadata
        if t.is_sparse or t.layout != torch.strided:
            h.update(b"T?" + str(tuple(t.shape)).encode())
            return
        t = t.cpu().contiguous()
        h.update(b"T" + str(t.dtype).encode() + str(tuple(t.shape)).encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        return
    if np is not None and isinstance(x, np.ndarray):
        h.update(b"A" + str(x.dtype).encode() + str(x.shape).encode())
        if x.dtype != object:
            h.update(np.ascontiguousarray(x).tobytes())
        else:
            for v in x.reshape(-1)[:4096]:
                _fingerprint_into(h, v, depth + 1)
        return
    if np is not None and isinstance(x, np.generic):
        h.update(b"S" + str(x.dtype).encode() + x.tobytes())
        return
    if isinstance(x, (bool, int, float, complex, str, bytes)) or x is None:
        h.update(b"P" + type(x).__name__.encode() + repr(x).encode())
        return
    if isinstance(x, dict) or (hasattr(x, "keys") and hasattr(x, "__getitem__") and hasattr(x, "items")):
        items = [(str(k), v) for k, v in x.items()]
        h.update(b"D%d" % len(items))
        for k, v in sorted(items, key=lambda kv: kv[0]):
            if k in _SKIPPED_KEYS or k.endswith("_transforms"):
                continue
            h.update(k.encode())
            _fingerprint_into(h, v, depth + 1)
        return
    if isinstance(x, (list, tuple)):
        h.update(b"L%d" % len(x))
        for v in x:
            _fingerprint_into(h, v, depth + 1)
        return
    if np is not None and (hasattr(x, "__array_interface__") or hasattr(x, "__array__")):
        try:
            _fingerprint_into(h, np.asarray(x), depth + 1)  # a PIL image, an array-like
            return
        except Exception:  # noqa: BLE001  (an __array__ that fails: its type is all we can say)
            pass
    h.update(b"O" + type(x).__qualname__.encode())


def fingerprint(x):
    """A 64-bit hex digest of a sample (or any value) as analyze.py compares them."""
    h = hashlib.blake2b(digest_size=8)
    _fingerprint_into(h, x)
    return h.hexdigest()


def _is_monai_randomizable(obj):
    return any(c.__name__ == "Randomizable" and c.__module__.startswith("monai") for c in type(obj).__mro__)


def _generator_types():
    types = [random.Random, torch.Generator]
    if np is not None:
        types += [np.random.RandomState, np.random.Generator]
    return tuple(types)


_GENERATOR_TYPES = _generator_types()


def _state_hash(g):
    """The state of a generator object as a digest (equal states, equal digests)."""
    if isinstance(g, random.Random):
        return _digest(repr(g.getstate()).encode())
    if isinstance(g, torch.Generator):
        return _digest(g.get_state().numpy().tobytes())
    if np is not None and isinstance(g, np.random.RandomState):
        kind, key, pos, has_gauss, gauss = g.get_state()
        return _digest(key.tobytes(), repr((kind, pos, has_gauss, gauss)).encode())
    if np is not None and isinstance(g, np.random.Generator):
        return _digest(json.dumps(g.bit_generator.state, sort_keys=True, default=str).encode())
    return None


def _global_states():
    """Python's random, numpy's global generator, torch's default CPU generator."""
    states = {"random": _digest(repr(random.getstate()).encode()),
              "torch": _digest(torch.get_rng_state().numpy().tobytes())}
    if np is not None:
        kind, key, pos, has_gauss, gauss = np.random.get_state()
        states["numpy"] = _digest(key.tobytes(), repr((kind, pos, has_gauss, gauss)).encode())
    return states


def _global_ids():
    ids = {id(random._inst): "random", id(torch.default_generator): "torch"}
    if np is not None:
        ids[id(np.random.mtrand._rand)] = "numpy"
    return ids


def _skip(obj):
    return isinstance(obj, (str, bytes, bytearray, numbers.Number, type(None), torch.Tensor, type, range,
                            type(os), type(_skip), type(len), functools.partial)) \
        or (np is not None and isinstance(obj, (np.ndarray, np.generic)))


def generators(root, path="dataset"):
    """[(name, generator)] reachable from root (a dataset): generator objects it
    holds (random.Random, numpy RandomState and Generator, torch.Generator) and
    the R of every MONAI Randomizable transform, walked breadth first through
    attributes, lists and dicts (the first 64 items of each), 8 levels deep, at
    most 4096 objects. A generator reached twice is named once, by its first
    path; the global generators are named random, numpy and torch."""
    found, seen = [], set(_global_ids())
    queue = collections.deque([(root, path, 0)])
    visited = 0
    while queue and visited < _MAX_OBJECTS:
        obj, name, depth = queue.popleft()
        if id(obj) in seen or depth > _MAX_DEPTH:
            continue
        if isinstance(obj, _GENERATOR_TYPES):
            seen.add(id(obj))
            found.append((name, obj))
            continue
        if _skip(obj):
            continue
        seen.add(id(obj))
        visited += 1
        if isinstance(obj, dict):
            children = [(v, f"{name}[{k!r}]") for k, v in itertools.islice(obj.items(), _MAX_CHILDREN)]
        elif isinstance(obj, (list, tuple, collections.deque)):
            children = [(v, f"{name}[{i}]") for i, v in enumerate(itertools.islice(obj, _MAX_CHILDREN))]
        else:
            try:
                attrs = vars(obj)
            except TypeError:
                attrs = {}
            children = []
            if _is_monai_randomizable(obj) and "R" not in attrs:
                # Randomizable.R is a class attribute until set_random_state: one
                # generator for every such transform of the process.
                children.append((type(obj).R, f"{name}.R"))
            children += [(v, f"{name}.{k}") for k, v in itertools.islice(attrs.items(), 2 * _MAX_CHILDREN)
                         if not k.startswith("__")]
        queue.extend((child, child_name, depth + 1) for child, child_name in children)
    return found


def _all_states(dataset, ids=None):
    """{name: state digest} of the global generators and those the dataset holds; ``ids``, a dict,
    receives {name: id(generator)} of the latter."""
    states = _global_states()
    for name, g in generators(dataset):
        h = _state_hash(g)
        if h is not None:
            states[name] = h
            if ids is not None:
                ids[name] = id(g)
    return states
