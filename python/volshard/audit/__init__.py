"""volshard.audit: prove a PyTorch or MONAI training script's data plan on one
machine, without GPUs and without changing the script.

From the shell, the script as torchrun would start it::

    python -m volshard.audit --nproc-per-node 2 --json audit.json train.py --lr 1e-3

From a test, a loader of your own::

    def make_loader(rank, world_size):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=0)
        return DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2)

    result = volshard.audit.check(make_loader, world_size=2, epochs=2)
    assert not result.errors, result.report

Pure Python over torch: it needs no compiled volshard module. The findings'
kinds (stable names, for CI) are KINDS; docs/audit.md says what each means,
what the audit records, and what it cannot see.
"""

import os
import random
import tempfile

from .analyze import KINDS  # noqa: F401

__all__ = ["AuditResult", "KINDS", "check", "main"]


def main(argv=None):
    """The launcher (``python -m volshard.audit``); returns the exit status."""
    from .launch import main as launch_main
    return launch_main(argv)


class AuditResult:
    """What check() found: ``findings`` (dicts with kind, level, loader, ranks,
    epochs, examples, message, fix), ``errors`` and ``notes`` (the findings of
    each level), ``kinds`` (their set), ``report`` (the readable text) and
    ``document`` (the launcher's JSON, records included)."""

    def __init__(self, document, report):
        self.document = document
        self.report = report
        self.findings = document["findings"]
        self.errors = [f for f in self.findings if f["level"] == "error"]
        self.notes = [f for f in self.findings if f["level"] != "error"]
        self.kinds = {f["kind"] for f in self.findings}

    @property
    def ok(self):
        """No error-level finding."""
        return not self.errors

    def __repr__(self):
        return f"AuditResult({len(self.errors)} errors, {len(self.notes)} notes: {sorted(self.kinds)})"


def _rng_snapshot():
    import torch
    state = {"random": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy
        state["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    return state


def _rng_restore(state):
    import torch
    random.setstate(state["random"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy
        numpy.random.set_state(state["numpy"])


def _set_epoch(loader, epoch):
    if callable(getattr(loader, "set_epoch", None)):  # volshard.Loader
        loader.set_epoch(epoch)
        return
    for owner in (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None),
                  getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if callable(getattr(owner, "set_epoch", None)):
            owner.set_epoch(epoch)
            return


def _close(loader):
    iterator = getattr(loader, "_iterator", None)  # persistent workers
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    if callable(getattr(loader, "close", None)):  # volshard.Loader's threads
        loader.close()


def check(make_loader, world_size=2, epochs=2, reruns=2, scored=None, fingerprints=True):
    """Audits the loaders ``make_loader(rank, world_size)`` returns, as the
    launcher audits a script's, in this process: for each of ``reruns`` runs,
    each rank's loader is made and iterated for ``epochs`` epochs (the loop is
    the audit's own: it calls ``set_epoch(epoch)`` where the loader or its
    sampler has one), its workers included. make_loader must give the sampler
    its ``num_replicas`` and ``rank`` (there is no process group).

    Each rank, and each run, starts from the global random state (Python's,
    numpy's, torch's) that check() was called with, as ranks of a script that
    seeds every rank alike would; seed per rank inside make_loader if your
    script does. The state is restored when check() returns.

    ``scored``: True if the loader's batches are scored (a validation loader:
    padding is then an error), False if not, None to infer it from the
    function's name (val, eval, test, ...). Returns an AuditResult."""
    from . import analyze as an
    from . import record, report

    if world_size < 1 or epochs < 1 or reruns < 1:
        raise ValueError(f"check: world_size={world_size}, epochs={epochs} and reruns={reruns} must be >= 1")
    if scored is None and an._words(getattr(make_loader, "__name__", "")) & an._SCORED_WORDS:
        scored = True
    snapshot = _rng_snapshot()
    runs = []
    with tempfile.TemporaryDirectory(prefix="volshard_audit_") as work:
        try:
            for k in range(reruns):
                directory = os.path.join(work, f"run{k + 1}")
                os.makedirs(directory)
                for rank in range(world_size):
                    _rng_restore(snapshot)
                    record.install(record.Recorder(directory, rank, 0, fingerprints))
                    loader = None
                    try:
                        loader = make_loader(rank, world_size)
                        for epoch in range(epochs):
                            _set_epoch(loader, epoch)
                            for _ in loader:
                                pass
                    finally:
                        if loader is not None:
                            _close(loader)
                        record.uninstall()
                runs.append(an.load_run(directory, k + 1))
        finally:
            _rng_restore(snapshot)
        findings, resumes = an.analyze(runs, scored_override=scored)
        meta = {"script": getattr(make_loader, "__qualname__", repr(make_loader)), "args": [],
                "world_size": world_size, "epochs": epochs, "runs": reruns, "entry": "check", "show_unseen": False}
        document = report.document(meta, runs, findings, resumes, scored)
    return AuditResult(document, report.text(document))
