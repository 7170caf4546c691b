"""volshard.Fingerprint: fingerprints.jsonl for your own PyTorch loop, the
lines `volshard train` writes, so that `volshard diff RUN_A RUN_B` names the
first step where two of your runs part and what differs first."""

import json
import os

import torch
import torch.distributed as dist

from . import _volshard

_MASK = (1 << 64) - 1


def _xxh64_ints(values):
    return _volshard._xxh64(torch.tensor(list(values), dtype=torch.int64))


def _hex(value):
    return "%016x" % (value & _MASK)


class Fingerprint:
    """Writes RUN/fingerprints.jsonl for a model trained in your own loop::

        fp = volshard.Fingerprint(model, "run")      # rank 0 writes; every rank calls step()
        for batch in loader:                         # volshard.Loader batches (or dicts alike)
            loss = loss_fn(model(batch["image"]), batch["label"])
            loss.backward(); optimizer.step()
            fp.step(batch, loss)                     # after the step: gradients and new weights
            optimizer.zero_grad()

    Per step, as `volshard train`: 64-bit sums over the step's samples (of
    every rank, with torch.distributed) of XXH64 of their ids (``index``,
    ``patch_index``), their augmentation (``crop_start``, ``rot90_k``,
    ``flipped``, when the batch has them) and their bytes (image and label
    rows); the loss; one hash per parameter of its gradient and of its value
    (a bucket per parameter). ``config`` (a dict, optional) is written as
    RUN/config.json, which `volshard diff` compares too."""

    def __init__(self, model, run_dir, config=None):
        self.model = model
        self.run_dir = os.fspath(run_dir)
        self.step_count = 0
        self._lead = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
        self._names = [name for name, _ in model.named_parameters()]
        if self._lead:
            os.makedirs(self.run_dir, exist_ok=True)
            with open(os.path.join(self.run_dir, "config.json"), "w") as f:
                json.dump(config or {}, f, indent=2, sort_keys=True)
            with open(os.path.join(self.run_dir, "fingerprints.jsonl"), "w") as f:
                f.write(json.dumps({"type": "layout", "buckets": [[n] for n in self._names]}) + "\n")

    def _sample_sums(self, batch):
        image, label = batch["image"], batch["label"]
        rows = image.shape[0]
        index = batch.get("index", list(range(rows)))
        patch = batch.get("patch_index", [-1] * rows)
        crop = batch.get("crop_start", [[0, 0, 0]] * rows)
        rot = batch.get("rot90_k", [0] * rows)
        flipped = batch.get("flipped", [[False] * 3] * rows)
        sums = [0, 0, 0]
        for r in range(rows):
            i, p = int(index[r]), int(patch[r])
            flips = sum(1 << a for a, f in enumerate(flipped[r]) if f)
            sums[0] += _xxh64_ints([i, p])
            sums[1] += _xxh64_ints([i, p, *map(int, crop[r]), int(rot[r]), flips, 0])
            sums[2] += _volshard._xxh64(label[r], _volshard._xxh64(image[r]))
        sums = [s & _MASK for s in sums]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            halves = torch.tensor([h for s in sums for h in (s >> 32, s & 0xFFFFFFFF)], dtype=torch.int64)
            dist.all_reduce(halves)
            sums = [((int(halves[2 * k]) << 32) + int(halves[2 * k + 1])) & _MASK for k in range(3)]
        return sums

    def step(self, batch, loss, epoch=0):
        """One line for the step just taken (call after optimizer.step())."""
        self.step_count += 1
        indices, augmentation, data = self._sample_sums(batch)
        if not self._lead:
            return
        params = [p for _, p in self.model.named_parameters()]
        grads = [_hex(_volshard._xxh64(p.grad)) if p.grad is not None else _hex(0) for p in params]
        weights = [_hex(_volshard._xxh64(p)) for p in params]
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        line = {"type": "step", "step": self.step_count, "epoch": int(epoch), "world": world,
                "indices": _hex(indices), "augmentation": _hex(augmentation), "bytes": _hex(data),
                "loss": float(loss), "grads": grads, "weights": weights}
        with open(os.path.join(self.run_dir, "fingerprints.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
