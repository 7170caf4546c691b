"""Validation as `volshard train` validates: whole prepared volumes, one
rank's share, and MONAI's sliding-window inference over the trainer's own
window logic."""

import torch

from . import _volshard
from ._checks import fspath as _fspath
from .loader import _NO_TRANSFORM, _feed_options, _keys, _named, _split
from .sampler import _world


class ValidationLoader:
    """The whole volumes of this rank's validation share, one at a time, as
    `volshard train` validates: the ``pipeline``'s deterministic prefix
    (orientation, spacing, intensity with per-volume statistics, foreground
    crop, label mapping) without the training-only steps (crops, spatial_pad,
    augmentation). Each item is a dict: ``image`` (1 x C x X x Y x Z float32),
    ``label`` (1 x 1 x X x Y x Z float32), ``index`` (in the split), ``source``
    (image path) and ``affine`` (4 x 4 float64, the prepared volume's).

    ``data`` and ``split``/``val_fraction`` as ``volshard.Loader``'s (default
    the "validation" part). Rank r of W takes volumes r, r + W, ... (MONAI's
    ``even_divisible=False``; with fewer volumes than ranks, ranks r < n take
    one each): every volume is scored once, so summing per-volume scores over
    ranks gives one process's metric (MONAI's metrics, DiceMetric and the
    others, gather their buffers over the ranks in ``aggregate()`` already:
    every rank calls it and gets the metric of all volumes; do not all-reduce
    it again). ``num_replicas`` and ``rank`` default to torch.distributed's
    when it is initialised. ``keys`` as ``volshard.Loader``'s: the items'
    image and label then go by those names; ``transform`` is refused, as
    there."""

    def __init__(self, data, *, split="validation", val_fraction=0.2, pipeline=None, num_replicas=None,
                 rank=None, keys=None, transform=None):
        if transform is not None:
            raise TypeError(f"ValidationLoader: transform={type(transform).__name__} would go unused: "
                            f"{_NO_TRANSFORM}")
        self.keys = _keys(keys, "ValidationLoader", also_taken=("affine",))
        self.pairs = _split(data, split, val_fraction, self.keys)
        world, me = _world()
        self.num_replicas = world if num_replicas is None else int(num_replicas)
        self.rank = me if rank is None else int(rank)
        if self.num_replicas < 1 or not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"ValidationLoader: rank={self.rank} must be in [0, num_replicas={self.num_replicas})")
        self._feed = _feed_options(None, None, None, None, pipeline, who="ValidationLoader")

    @property
    def indices(self):
        """This rank's volumes, as indices into ``pairs``."""
        return list(range(self.rank, len(self.pairs), self.num_replicas))

    def __len__(self):
        return len(self.indices)

    def __iter__(self):
        for i in self.indices:
            image, label = self.pairs[i]
            item = _volshard._load_whole_volume(image, label, i, self._feed)
            yield _named({"image": item["image"].unsqueeze(0), "label": item["label"].unsqueeze(0), "index": i,
                          "source": image, "affine": item["affine"]}, self.keys)


def sliding_window_inference(inputs, roi_size, sw_batch_size, predictor, overlap=0.25, mode="constant",
                             sigma_scale=0.125, tta_flips=()):
    """MONAI's ``sliding_window_inference(inputs, roi_size, sw_batch_size,
    predictor, overlap, mode, sigma_scale)`` (zero padding), through the C++
    function `volshard train` validates and `volshard predict` predicts with:
    windows at MONAI's scan interval, axes shorter than the window padded
    symmetrically, overlapping outputs averaged (``mode="constant"``) or
    weighted by MONAI's Gaussian importance map (``mode="gaussian"``,
    ``sigma_scale`` one value or three). ``tta_flips`` (axes 0, 1, 2 of X, Y,
    Z; nnU-Net's default is all three) runs ``predictor`` on each window and on
    its flips over every non-empty subset of those axes, flipped back and
    averaged. ``inputs`` is N x C x X x Y x Z (each item on its own);
    ``roi_size`` an int or three, a value <= 0 taking the input's size on that
    axis, as MONAI. Call it under ``torch.no_grad()`` with the network in eval
    mode, as one validates."""
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 5:
        raise ValueError("sliding_window_inference: inputs must be an N x C x X x Y x Z tensor")
    roi = [int(roi_size)] * 3 if isinstance(roi_size, int) else [int(r) for r in roi_size]
    if len(roi) != 3:
        raise ValueError(f"sliding_window_inference: roi_size={roi_size!r} must be an int or three ints")
    roi = [r if r > 0 else int(inputs.shape[2 + a]) for a, r in enumerate(roi)]
    sigma = [float(sigma_scale)] * 3 if isinstance(sigma_scale, (int, float)) else [float(v) for v in sigma_scale]
    if len(sigma) != 3:
        raise ValueError(f"sliding_window_inference: sigma_scale={sigma_scale!r} must be a number or three")
    mode = getattr(mode, "value", mode)  # MONAI's BlendMode enum, or its string
    flips = [int(a) for a in tta_flips]
    outputs = [_volshard._sliding_window_inference(inputs[n:n + 1], roi, int(sw_batch_size), predictor,
                                                    float(overlap), str(mode), sigma, flips)
               for n in range(inputs.shape[0])]
    return torch.cat(outputs, 0)


def keep_largest_components(labels):
    """MONAI's ``KeepLargestConnectedComponent`` (independent, full connectivity:
    26 neighbours) on an X x Y x Z integer label map: each class > 0 keeps only
    its largest connected component, the rest of its voxels set to 0."""
    labels = torch.as_tensor(labels)
    if labels.dim() != 3:
        raise ValueError(f"keep_largest_components: labels must be X x Y x Z, got {tuple(labels.shape)}")
    return _volshard._keep_largest_components(labels)


def read_volume(path, as_float=False, apply_scaling=True, max_voxels=None):
    """Reads a .nii or .nii.gz as nibabel does, channel-first: ``.data`` C x X x Y x Z,
    ``.affine``, ``.spacing_mm``, ``.header``. ``max_voxels`` (None: the library's
    limit) refuses larger volumes before allocating."""
    args = (_fspath(path, "read_volume"), bool(as_float), bool(apply_scaling))
    return _volshard.read_volume(*args) if max_voxels is None else _volshard.read_volume(*args, int(max_voxels))


def write_volume(path, data, affine, gzip_level=-1, nifti_version=0, spacing_mm=(), descrip=""):
    """Writes X x Y x Z or C x X x Y x Z data (a tensor or a numpy array) as
    NIfTI with a 4 x 4 affine (a tensor, array or nested list), atomically:
    nibabel reads data[c, i, j, k] as [i, j, k, c]."""
    data = torch.as_tensor(data)
    affine = torch.as_tensor(affine, dtype=torch.float64)
    if tuple(affine.shape) != (4, 4):
        raise ValueError(f"write_volume: affine must be 4 x 4, got {tuple(affine.shape)}")
    _volshard.write_volume(_fspath(path, "write_volume"), data, affine.tolist(), gzip_level, nifti_version,
                           [float(s) for s in spacing_mm], descrip)
