"""volshard from Python: deterministic, distributed data pipelines for 3D
medical segmentation, as ``torch.utils.data`` pieces over volshard's C++ core.

    sampler = volshard.DistributedSampler(len(pairs), shuffle=True, seed=0)
    loader = volshard.Loader(pairs, sampler, crop=96, num_samples=4, batch_size=2, workers=2)
    for epoch in range(start_epoch, epochs):
        loader.set_epoch(epoch)
        for batch in loader:   # {"image": Tensor, "label": Tensor, "index": [...], ...}
            ...

See python/README.md in the repository.
"""

import torch  # noqa: F401  (loads libtorch before the extension that links it)

from ._volshard import (  # noqa: F401
    SeedStreams,
    Volume,
    large_block_stats,
    pairs_from_datalist,
    pairs_from_folder,
    read_volume,
    tune_allocator_for_volumes,
)
from .loader import Loader  # noqa: F401
from .sampler import DistributedSampler  # noqa: F401
from .seeds import WorkerInit, worker_init_fn  # noqa: F401
from .fingerprint import Fingerprint  # noqa: F401
from .validation import ValidationLoader, sliding_window_inference, write_volume  # noqa: F401

__version__ = "0.1.0"
__all__ = [
    "DistributedSampler",
    "Fingerprint",
    "Loader",
    "SeedStreams",
    "ValidationLoader",
    "Volume",
    "WorkerInit",
    "large_block_stats",
    "pairs_from_datalist",
    "pairs_from_folder",
    "read_volume",
    "sliding_window_inference",
    "tune_allocator_for_volumes",
    "worker_init_fn",
    "write_volume",
]
