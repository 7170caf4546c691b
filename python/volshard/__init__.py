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

try:
    from ._volshard import (  # noqa: F401
        SeedStreams,
        Volume,
        large_block_stats,
        pairs_from_folder,
        tune_allocator_for_volumes,
    )
except ModuleNotFoundError as e:
    # No compiled module (the source tree's python/, or a checkout not built):
    # the pure-Python volshard.audit still imports; everything else says why it
    # cannot. A module that is there but fails to load is still an error here.
    if e.name != __name__ + "._volshard":
        raise
    _missing = e
else:
    _missing = None
    from .loader import Loader, pairs_from_datalist  # noqa: F401
    from .sampler import DistributedSampler  # noqa: F401
    from .seeds import WorkerInit, worker_init_fn  # noqa: F401
    from .fingerprint import Fingerprint  # noqa: F401
    from .validation import (  # noqa: F401
        ValidationLoader,
        keep_largest_components,
        read_volume,
        sliding_window_inference,
        write_volume,
    )

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
    "keep_largest_components",
    "tune_allocator_for_volumes",
    "worker_init_fn",
    "write_volume",
]


def __getattr__(name):
    if _missing is not None and name in __all__:
        raise ImportError(f"volshard.{name} needs the compiled module volshard._volshard, which is not here "
                          f"({_missing}): build it (make python: build/python) or pip install . "
                          f"(volshard.audit works without it)")
    raise AttributeError(f"module 'volshard' has no attribute '{name}'")
