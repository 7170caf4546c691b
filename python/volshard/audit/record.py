"""The recorder that runs inside every audited process (each rank, each of its
DataLoader workers, or the process that calls ``check()``): it patches torch's
DataLoader machinery and writes what it sees as JSON lines, one file per
process, for analyze.py to read. Nothing here changes what a loader yields.

What is patched, and why there:
- ``DataLoader.__init__``: where the loader was made (the call chain of the
  user's frames), which names the loader in every finding.
- ``DataLoader.__iter__``: an epoch begins; the random state the rank starts it
  from; the stop after E epochs (AuditStop, raised before the sampler is
  touched).
- ``_BaseDataLoaderIter._next_index`` and ``_MultiProcessingDataLoaderIter.
  _try_put_index``: each batch of indices the sampler yields, and the worker it
  is sent to. ``_BaseDataLoaderIter.__next__``: each batch the loop takes, the
  grad mode it takes it in, the end of the epoch.
- ``_DatasetKind.create_fetcher``: every fetch, in the main process and in each
  worker (its fetcher is made after torch seeds the worker and after
  ``worker_init_fn``): the samples' fingerprints and the generators a fetch
  draws from, with the state each starts the epoch from.
- ``torch.utils.data._utils.worker._worker_loop`` (for the time a multi-process
  iterator starts its workers): an entry that tells the worker which loader and
  epoch it serves, and that installs these patches under spawn too.
- ``state_dict``/``load_state_dict`` of the samplers, batch samplers and loaders
  iterated: saves and restores, for the resume check.
(devices.py runs NCCL as Gloo and CUDA placement on the CPU in the launcher's
ranks; states.py hashes samples and generators.)
"""

import collections
import functools
import json
import linecache
import numbers
import os
import re
import sys
import sysconfig
import threading
import weakref

import torch
import torch.utils.data as tud
import torch.utils.data.dataloader as tdl
import torch.utils.data._utils.worker as tworker

try:
    import numpy as np
except ImportError:  # torch runs without numpy; so does the audit
    np = None

from .states import _all_states, _global_states, fingerprint

_AUDIT_DIR = os.path.dirname(os.path.abspath(__file__))
_VOLSHARD_DIR = os.path.dirname(_AUDIT_DIR)
_MAX_FRAMES = 4  # the innermost user frames that name where a loader was made


class AuditStop(BaseException):
    """Raised by ``iter(loader)`` when the loader has had the epochs asked for.
    A BaseException, so that ``except Exception`` in the script lets it pass."""


# ----------------------------------------------------------------- call sites


def _excluded_dirs():
    dirs = [os.path.dirname(os.path.abspath(torch.__file__)), _VOLSHARD_DIR]
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.append(os.path.abspath(p))
    return tuple(d + os.sep for d in dirs)


_EXCLUDED = _excluded_dirs()


def _is_user_file(filename):
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if path.startswith(_EXCLUDED):
        return False
    monai = sys.modules.get("monai")
    if monai is not None and getattr(monai, "__file__", None):
        if path.startswith(os.path.dirname(os.path.abspath(monai.__file__)) + os.sep):
            return False
    return True


def user_frames(skip=1):
    """The call chain's frames in the user's code, innermost first: frames of
    torch, MONAI, volshard and the standard library left out."""
    frames = []
    f = sys._getframe(skip)
    while f is not None:
        if _is_user_file(f.f_code.co_filename):
            frames.append((os.path.abspath(f.f_code.co_filename), f.f_lineno))
        f = f.f_back
    return frames


_ASSIGNED = re.compile(r"^\s*(?:self\.)?([A-Za-z_][\w]*)\s*(?::[^=]*)?=[^=]")
_ITERATED = re.compile(r"\bin\s+(?:enumerate\(|tqdm\(|iter\()?\s*(?:self\.)?([A-Za-z_][\w]*)")


def _source_name(frame, pattern):
    """The name a line of source binds (x = ...) or iterates (for b in x:); for
    a call that spans lines, the name its first line binds."""
    if not frame:
        return None
    filename, lineno = frame
    line = linecache.getline(filename, lineno)
    m = pattern.search(line)
    if m or pattern is _ITERATED:
        return m.group(1) if m else None
    for back in range(1, 4):
        previous = linecache.getline(filename, lineno - back).split("#")[0].rstrip()
        if not previous or previous[-1] not in "([{,=\\":
            return None  # the line above ends a statement: this line starts one
        m = pattern.search(previous)
        if m:
            return m.group(1)
    return None


# ------------------------------------------------------------------- recorder


class Recorder:
    """Writes one JSON line per event into directory/rank{R}.{pid}.jsonl. Each
    process writes its own file (a forked worker opens its own at its first
    line); lines are flushed as written, so a killed process loses nothing it
    recorded."""

    def __init__(self, directory, rank, epochs=0, fingerprints=True):
        self.directory = directory
        self.rank = int(rank)
        self.epochs = int(epochs)  # stop a loader at its (epochs+1)-th iteration; 0: never
        self.fingerprints = fingerprints
        self._file = None
        self._file_key = None
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()
        self.complete = collections.Counter()  # loader key -> complete epochs (this process)
        self.ordinal = collections.Counter()   # loader key -> iterations begun (this process)
        self.described = set()
        self.first_substitution = {}

    def emit(self, record):
        pid = os.getpid()
        if self._lock_pid != pid:  # a forked child: the parent's lock may be held by a thread that is not here
            self._lock = threading.Lock()
            self._lock_pid = pid
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            key = (self.rank, pid)
            if self._file_key != key:
                self._file = open(os.path.join(self.directory, f"rank{self.rank}.{pid}.jsonl"), "a",
                                  buffering=1)
                self._file_key = key
            self._file.write(line)

    def close(self):
        with self._lock:
            if self._file is not None and self._file_key and self._file_key[1] == os.getpid():
                self._file.close()
            self._file, self._file_key = None, None


class _Iteration:
    """One pass of one loader in the main process (an epoch, if it ends)."""

    def __init__(self, key, ordinal, multiprocess):
        self.key = key
        self.ordinal = ordinal
        self.multiprocess = multiprocess
        self.batches = []   # indices of each batch the sampler yielded, in order
        self.pending = []   # multi-process: yielded, not yet sent to a worker
        self.consumed = 0   # batches the loop took
        self.ended = False

    def consumed_samples(self):
        return sum(len(b) for b in self.batches[:self.consumed])


class _State:
    recorder = None
    current = None          # the _Iteration whose iter() is running (main process)
    worker = None           # in a worker: its _WorkerContext
    owner = {}              # id(sampler, batch sampler or loader) -> (reference to it, its current _Iteration)
    pending_resume = {}     # id(object) -> (reference to it, state digest passed to its load_state_dict)
    stateful_depth = threading.local()
    installed = False
    clock = 0               # counts iteration starts and batches taken, in this process
    begun_at = {}           # loader key -> clock when its latest iteration began
    activity = {}           # loader key -> (its latest iteration ended, clock of its latest batch or start)


def _reference(obj):
    """A weak reference where the object takes one (a loader must not outlive the script's use of it:
    its persistent workers would stay), else the object."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _lookup(table, obj):
    """table[id(obj)]'s value when it was stored for this very object (ids are reused)."""
    entry = table.get(id(obj))
    if entry is None or entry[0]() is not obj:
        return None
    return entry[1]


_S = _State()


def _emit(record):
    if _S.recorder is not None:
        _S.recorder.emit(record)


# ------------------------------------------------------------ loader metadata


def _qualname(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def _plain(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    return None


def _index_sampler_of(loader):
    """The sampler whose indices the loader reads: its sampler, or the one a
    custom batch sampler wraps."""
    bs = getattr(loader, "batch_sampler", None)
    if bs is not None and not isinstance(bs, tud.BatchSampler) and hasattr(bs, "sampler"):
        return bs.sampler
    return getattr(loader, "sampler", None)


def _sized(x):
    if isinstance(x, int):
        return x
    try:
        return len(x)
    except Exception:  # noqa: BLE001  (a dataset without a length)
        return None


def _volshard_sampler_class():
    mod = sys.modules.get("volshard.sampler")
    return getattr(mod, "DistributedSampler", None) if mod is not None else None


def describe_sampler(sampler, dataset_size, dataset=None):
    """The sampler's class and the attributes the analyses read; ``partition``
    says what they may expect of it: "distributed" (torch's, MONAI's or
    volshard's DistributedSampler over the loader's own dataset: each index
    once over the ranks, plus padding), "whole" (a sampler over the whole
    dataset, every rank reading it all), "replacement" (draws with
    replacement: repeats are meant) or "other" (a custom sampler, or a
    DistributedSampler over another index space, as wrappers of other samplers
    are)."""
    d = {"class": _qualname(type(sampler)) if sampler is not None else None}
    for a in ("shuffle", "seed", "drop_last", "num_replicas", "rank", "num_samples", "total_size", "epoch",
              "replacement", "mode"):
        if hasattr(sampler, a):
            try:
                v = _plain(getattr(sampler, a))
            except Exception:  # noqa: BLE001  (a property that fails)
                v = None
            if v is not None:
                d[a] = v
    vs = _volshard_sampler_class()
    size = dataset_size
    if isinstance(sampler, tud.DistributedSampler) or (vs is not None and isinstance(sampler, vs)):
        own = getattr(sampler, "dataset", None)
        size = _sized(own)
        same_space = own is dataset or dataset is None or (isinstance(own, int) and own == dataset_size)
        d["partition"] = "distributed" if same_space and size is not None else "other"
        if size is None:
            size = dataset_size
    elif d.get("replacement") or type(sampler).__name__ in ("WeightedRandomSampler",
                                                            "DistributedWeightedRandomSampler"):
        d["partition"] = "replacement"
    elif isinstance(sampler, (tud.SequentialSampler, tud.RandomSampler)):
        d["partition"] = "whole"
        if isinstance(sampler, tud.RandomSampler):
            d["shuffle"] = True
            if getattr(sampler, "_num_samples", None) is not None:
                d["partition"] = "other"  # a subset of the dataset per epoch
        else:
            d["shuffle"] = False
    else:
        d["partition"] = "other"
    if size is not None:
        d["dataset_size"] = int(size)
    return d


def _describe_loader(loader, key, site, name):
    dataset = getattr(loader, "dataset", None)
    sampler = _index_sampler_of(loader)
    iterable = isinstance(dataset, tud.IterableDataset)
    size = None if iterable else _sized(dataset)
    bs = getattr(loader, "batch_sampler", None)
    return {"t": "loader", "key": key, "site": site, "name": name, "class": _qualname(type(loader)),
            "dataset": _qualname(type(dataset)), "dataset_size": size, "iterable": iterable,
            "batch_size": _plain(getattr(loader, "batch_size", None)),
            "batch_sampler": _qualname(type(bs)) if bs is not None else None,
            "drop_last": bool(getattr(loader, "drop_last", False)),
            "num_workers": int(getattr(loader, "num_workers", 0)),
            "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
            "sampler": describe_sampler(sampler, size, dataset)}


def _loader_key(loader):
    site = getattr(loader, "_volshard_audit_site", None)
    if site is None:  # made before the audit started (or by code that bypassed __init__)
        site = [(f"<{type(loader).__name__} made before the audit>", 0)]
    return " < ".join(f"{f}:{line}" for f, line in site), site


def _int_index(i):
    if isinstance(i, bool):
        return i
    if isinstance(i, numbers.Integral):
        return int(i)
    if isinstance(i, torch.Tensor) and i.numel() == 1 and not i.is_floating_point():
        return int(i.item())
    if np is not None and isinstance(i, np.integer):
        return int(i)
    if isinstance(i, (str, float)):
        return i
    if isinstance(i, (tuple, list)) and all(isinstance(x, numbers.Integral) for x in i):
        return repr(tuple(int(x) for x in i))  # a (volume, patch) pair and the like
    return f"<{type(i).__name__} {fingerprint(i)}>"  # its repr may hold an address


def _indices(index):
    if isinstance(index, (list, tuple)):
        return [_int_index(i) for i in index]
    if isinstance(index, torch.Tensor) and index.dim() == 1:
        return [_int_index(i) for i in index.tolist()]
    return [_int_index(index)]


# --------------------------------------------------------------- the patches


_ORIG = {}


def _begin_iteration(loader, multiprocess, kind="torch"):
    """Called as iter(loader) starts: raises AuditStop after E epochs, else
    records the iteration's start and returns its _Iteration."""
    rec = _S.recorder
    key, site = _loader_key(loader)
    if rec.epochs > 0 and rec.complete[key] >= rec.epochs:
        # Not while another loader is inside an epoch it worked on since this one's last began (an
        # auxiliary loader read in full at every step of a training epoch waits for that epoch).
        since = _S.begun_at.get(key, -1)
        busy = [k for k, (ended, last) in _S.activity.items() if k != key and not ended and last > since]
        if not busy:
            raise AuditStop(f"{key}: {rec.complete[key]} epochs audited")
    _S.clock += 1
    _S.begun_at[key] = _S.clock
    _S.activity[key] = (False, _S.clock)
    frames = user_frames(3)
    iter_site = frames[0] if frames else None
    if key not in rec.described:
        rec.described.add(key)
        name = getattr(loader, "_volshard_audit_name", None)
        if kind == "torch":
            record = _describe_loader(loader, key, f"{site[0][0]}:{site[0][1]}", name)
        else:
            record = _describe_volshard_loader(loader, key, f"{site[0][0]}:{site[0][1]}", name)
        _emit(record)
    it = _Iteration(key, rec.ordinal[key], multiprocess)
    rec.ordinal[key] += 1
    sampler = _index_sampler_of(loader) if kind == "torch" else loader.sampler
    objects = [loader, sampler, getattr(loader, "batch_sampler", None)]
    resumed = None
    for obj in objects:
        if obj is None:
            continue
        _wrap_stateful(type(obj))
        _S.owner[id(obj)] = (_reference(obj), it)
        digest = _lookup(_S.pending_resume, obj)
        if digest is not None:
            resumed = digest
            del _S.pending_resume[id(obj)]
    dataset = getattr(loader, "dataset", None) if kind == "torch" else None
    _emit({"t": "iter", "key": key, "epoch": it.ordinal, "kind": kind,
           "sampler": describe_sampler(sampler, _sized(dataset) if dataset is not None else None, dataset),
           "iter_site": f"{iter_site[0]}:{iter_site[1]}" if iter_site else None,
           "iter_name": _source_name(iter_site, _ITERATED), "resumed": resumed,
           "states": _global_states() if dataset is None else _all_states(dataset)})
    return it


def _dataloader_init(self, *args, **kwargs):
    _ORIG["init"](self, *args, **kwargs)
    if _S.recorder is not None and getattr(self, "_volshard_audit_site", None) is None:
        frames = user_frames(2)[:_MAX_FRAMES]
        self._volshard_audit_site = frames or [("<no user frame>", 0)]
        self._volshard_audit_name = _source_name(frames[0], _ASSIGNED) if frames else None


def _dataloader_iter(self):
    if _S.recorder is None or _S.worker is not None:
        return _ORIG["iter"](self)
    multiprocess = getattr(self, "num_workers", 0) > 0
    it = _begin_iteration(self, multiprocess)
    previous, _S.current = _S.current, it
    try:
        iterator = _ORIG["iter"](self)
    finally:
        _S.current = previous
    iterator._volshard_audit = it
    return iterator


def _iteration_of(iterator):
    if _S.current is not None:  # inside iter(): the iterator may still carry the previous epoch's
        iterator._volshard_audit = _S.current
        return _S.current
    return getattr(iterator, "_volshard_audit", None)


def _next_index(self):
    index = _ORIG["next_index"](self)
    it = _iteration_of(self) if _S.recorder is not None else None
    if it is not None:
        indices = _indices(index)
        if it.multiprocess:
            it.pending.append(indices)
        else:
            k = len(it.batches)
            it.batches.append(indices)
            _emit({"t": "batch", "key": it.key, "epoch": it.ordinal, "k": k, "indices": indices, "worker": -1})
    return index


def _try_put_index(self):
    before = self._send_idx
    _ORIG["try_put_index"](self)
    it = _iteration_of(self) if _S.recorder is not None else None
    if it is None or not it.pending:
        return
    if self._send_idx == before + 1:
        indices = it.pending.pop(0)
        worker = self._task_info[before][0]
        k = len(it.batches)
        it.batches.append(indices)
        _emit({"t": "batch", "key": it.key, "epoch": it.ordinal, "k": k, "indices": indices, "worker": int(worker)})
    else:  # yielded but sent to no worker (an exhausted iterable dataset): not read
        it.pending.pop(0)


def _grad_on():
    return torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def _iter_next(self):
    it = getattr(self, "_volshard_audit", None) if _S.recorder is not None else None
    try:
        data = _ORIG["next"](self)
    except StopIteration:
        if it is not None and not it.ended:
            _ended(it)
        raise
    if it is not None:
        _took(it)
    return data


def _took(it):
    _emit({"t": "next", "key": it.key, "epoch": it.ordinal, "k": it.consumed, "grad": _grad_on()})
    it.consumed += 1
    _S.clock += 1
    _S.activity[it.key] = (False, _S.clock)


def _ended(it):
    it.ended = True
    _S.recorder.complete[it.key] += 1
    _S.activity[it.key] = (True, _S.clock)
    _emit({"t": "end", "key": it.key, "epoch": it.ordinal, "consumed": it.consumed})


class _WorkerContext:
    def __init__(self, key, epoch, worker):
        self.key = key
        self.epoch = epoch
        self.worker = worker


class _AuditedFetcher:
    """Wraps torch's fetcher: fingerprints each sample before the collate
    function sees it, and notes which generators each fetch draws from."""

    def __init__(self, inner, key, epoch, worker):
        self._inner = inner
        self._key, self._epoch, self._worker = key, epoch, worker
        self._seq = 0
        self._known = {}
        self._samples = None
        self._collate = inner.collate_fn
        inner.collate_fn = self._record_collate

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _record_collate(self, data):
        self._samples = data
        return self._collate(data)

    def fetch(self, possibly_batched_index):
        rec = _S.recorder
        dataset = self._inner.dataset
        ids_before, ids_after = {}, {}
        before = _all_states(dataset, ids_before)
        new = {k: v for k, v in before.items() if k not in self._known}
        self._known.update(new)
        self._samples = None
        try:
            return self._inner.fetch(possibly_batched_index)
        finally:
            after = _all_states(dataset, ids_after)
            # A generator the dataset replaced while loading (self.rng = default_rng((seed, epoch, i)))
            # was not drawn from the state it held before: it is no one's shared stream.
            replaced = sorted(k for k in ids_before if k in ids_after and ids_after[k] != ids_before[k])
            drawn = sorted(k for k, v in before.items() if after.get(k) != v and k not in replaced)
            samples = self._samples
            self._samples = None
            if self._inner.auto_collation:
                samples = list(samples) if samples is not None else []
                indices = _indices(possibly_batched_index)[:len(samples)]
            else:
                samples = [samples] if samples is not None else []
                indices = _indices(possibly_batched_index)
            fps = [fingerprint(s) for s in samples] if rec.fingerprints else []
            _emit({"t": "fetch", "key": self._key, "epoch": self._epoch, "worker": self._worker,
                   "seq": self._seq, "indices": indices, "fp": fps, "new": new, "drawn": drawn,
                   "replaced": replaced, "pid": os.getpid()})
            self._seq += 1


def _create_fetcher(kind, dataset, auto_collation, collate_fn, drop_last):
    fetcher = _ORIG["create_fetcher"](kind, dataset, auto_collation, collate_fn, drop_last)
    if _S.recorder is None:
        return fetcher
    if _S.worker is not None:  # in a worker: its first fetcher serves the epoch it was started for
        w = _S.worker
        epoch = w.epoch
        w.epoch += 1  # a persistent worker makes a new fetcher at each epoch's _ResumeIteration
        return _AuditedFetcher(fetcher, w.key, epoch, w.worker)
    if _S.current is not None:
        return _AuditedFetcher(fetcher, _S.current.key, _S.current.ordinal, -1)
    return fetcher


class _WorkerEntry:
    """Stands in for torch's _worker_loop while a multi-process iterator starts
    its workers: tells each worker its loader and epoch, then runs torch's
    loop. Picklable (spawn and forkserver send it to the child, which then
    installs the patches itself)."""

    def __init__(self, config, key, epoch):
        self.config = config
        self.key = key
        self.epoch = epoch

    def __call__(self, *args):
        if _S.recorder is None or _S.recorder.directory != self.config["dir"]:
            install(Recorder(self.config["dir"], self.config["rank"], 0, self.config["fingerprints"]))
        worker_id = args[10]
        _S.worker = _WorkerContext(self.key, self.epoch, int(worker_id))
        _S.current = None
        return _ORIG["worker_loop"](*args)


def _multiprocess_init(self, loader):
    it = _S.current
    if _S.recorder is None or it is None:
        return _ORIG["mp_init"](self, loader)
    rec = _S.recorder
    config = {"dir": rec.directory, "rank": rec.rank, "fingerprints": rec.fingerprints}
    tworker._worker_loop = _WorkerEntry(config, it.key, it.ordinal)
    try:
        return _ORIG["mp_init"](self, loader)
    finally:
        tworker._worker_loop = _ORIG["worker_loop"]


# ------------------------------------------------- state_dict / load_state_dict


def _stateful_depth():
    return getattr(_S.stateful_depth, "n", 0)


def _wrap_stateful(cls):
    """Wraps state_dict and load_state_dict of a sampler, batch sampler or
    loader class (once): a save notes where the loader stood; a restore marks
    the object's next iteration as resumed from that state."""
    if cls.__dict__.get("_volshard_audit_wrapped") or not callable(getattr(cls, "state_dict", None)) \
            or not callable(getattr(cls, "load_state_dict", None)):
        return
    save, load = cls.state_dict, cls.load_state_dict

    @functools.wraps(save)
    def state_dict(self, *args, **kwargs):
        _S.stateful_depth.n = _stateful_depth() + 1
        try:
            out = save(self, *args, **kwargs)
        finally:
            _S.stateful_depth.n -= 1
        if _S.recorder is not None and _stateful_depth() == 0 and _S.worker is None:
            it = _lookup(_S.owner, self)
            _emit({"t": "save", "state": fingerprint(out), "object": _qualname(type(self)),
                   "key": it.key if it else None, "epoch": it.ordinal if it else None,
                   "position": it.consumed_samples() if it else None, "batches": it.consumed if it else None,
                   "last": len(it.batches[it.consumed - 1]) if it and 0 < it.consumed <= len(it.batches) else 0})
        return out

    @functools.wraps(load)
    def load_state_dict(self, state, *args, **kwargs):
        outer = _stateful_depth() == 0
        _S.stateful_depth.n = _stateful_depth() + 1
        try:
            return load(self, state, *args, **kwargs)
        finally:
            _S.stateful_depth.n -= 1
            if _S.recorder is not None and outer and _S.worker is None:
                digest = fingerprint(state)
                _S.pending_resume[id(self)] = (_reference(self), digest)
                _emit({"t": "load", "state": digest, "object": _qualname(type(self))})

    cls.state_dict = state_dict
    cls.load_state_dict = load_state_dict
    cls._volshard_audit_wrapped = True


# ----------------------------------------------------------- volshard.Loader


def _describe_volshard_loader(loader, key, site, name):
    sampler = loader.sampler
    size = _sized(sampler.dataset)
    return {"t": "loader", "key": key, "site": site, "name": name, "class": _qualname(type(loader)),
            "dataset": "volshard pairs", "dataset_size": size, "iterable": False,
            "batch_size": int(loader.batch_size), "batch_sampler": None,
            "drop_last": bool(loader.drop_last_batch), "num_workers": 0, "persistent_workers": False,
            "threads": True, "sampler": describe_sampler(sampler, size)}


def _volshard_loader_init(self, *args, **kwargs):
    _ORIG["vs_init"](self, *args, **kwargs)
    if _S.recorder is not None:
        frames = user_frames(2)[:_MAX_FRAMES]
        self._volshard_audit_site = frames or [("<no user frame>", 0)]
        self._volshard_audit_name = _source_name(frames[0], _ASSIGNED) if frames else None


def _volshard_loader_iter(self):
    if _S.recorder is None:
        yield from _ORIG["vs_iter"](self)
        return
    it = _begin_iteration(self, False, kind="volshard")
    for batch in _ORIG["vs_iter"](self):
        # Rows are the samples' crops, sample after sample (MONAI's list_data_collate order).
        order, rows = [], collections.defaultdict(list)
        for r, i in enumerate(batch["index"]):
            i = int(i)
            if i not in rows:
                order.append(i)
            rows[i].append(r)
        fps = []
        if _S.recorder.fingerprints:
            for i in order:
                fps.append(fingerprint([[batch["image"][r], batch["label"][r]] for r in rows[i]]))
        k = len(it.batches)
        it.batches.append(order)
        _emit({"t": "batch", "key": it.key, "epoch": it.ordinal, "k": k, "indices": order, "worker": -1})
        _emit({"t": "fetch", "key": it.key, "epoch": it.ordinal, "worker": -1, "seq": k, "indices": order,
               "fp": fps, "new": {}, "drawn": [], "pid": os.getpid()})
        _took(it)
        yield batch
    _ended(it)


def _patch_volshard_loader():
    """volshard.Loader is not a torch DataLoader: its own iteration is recorded
    (indices and samples; its augmentation draws from per-sample seed streams,
    not from a generator a process holds). Only where the compiled module is
    importable."""
    if "vs_iter" in _ORIG:
        return
    import importlib.util
    try:
        if importlib.util.find_spec("volshard._volshard") is None:
            return
        from volshard import loader as vs_loader
    except ImportError:
        return
    _ORIG["vs_init"] = vs_loader.Loader.__init__
    _ORIG["vs_iter"] = vs_loader.Loader.__iter__
    vs_loader.Loader.__init__ = _volshard_loader_init
    vs_loader.Loader.__iter__ = _volshard_loader_iter


# ------------------------------------------------------------------- install


def install(recorder):
    """Starts recording into ``recorder`` (idempotent: the patches go in once
    per process; a second call only swaps the recorder)."""
    _S.recorder = recorder
    if _S.installed:
        return
    _S.installed = True
    _ORIG["init"] = tud.DataLoader.__init__
    _ORIG["iter"] = tud.DataLoader.__iter__
    _ORIG["next_index"] = tdl._BaseDataLoaderIter._next_index
    _ORIG["next"] = tdl._BaseDataLoaderIter.__next__
    _ORIG["try_put_index"] = tdl._MultiProcessingDataLoaderIter._try_put_index
    _ORIG["mp_init"] = tdl._MultiProcessingDataLoaderIter.__init__
    _ORIG["create_fetcher"] = tdl._DatasetKind.create_fetcher
    _ORIG["worker_loop"] = tworker._worker_loop
    tud.DataLoader.__init__ = functools.wraps(_ORIG["init"])(_dataloader_init)
    tud.DataLoader.__iter__ = functools.wraps(_ORIG["iter"])(_dataloader_iter)
    tdl._BaseDataLoaderIter._next_index = _next_index
    tdl._BaseDataLoaderIter.__next__ = _iter_next
    tdl._MultiProcessingDataLoaderIter._try_put_index = _try_put_index
    tdl._MultiProcessingDataLoaderIter.__init__ = _multiprocess_init
    tdl._DatasetKind.create_fetcher = staticmethod(_create_fetcher)
    _patch_volshard_loader()


def uninstall():
    """Stops recording (the patches stay, inert, until the process ends)."""
    if _S.recorder is not None:
        _S.recorder.close()
    _S.recorder = None
    _S.current = None
    _S.owner.clear()
    _S.pending_resume.clear()
    _S.begun_at.clear()
    _S.activity.clear()
