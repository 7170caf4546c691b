"""MONAI random transforms (RandSpatialCropd, RandFlipd), seeded as a careful
user seeds them (set_determinism and transforms.set_random_state, per rank),
behind 2 workers. --loader monai: MONAI's DataLoader, whose worker_init_fn
reseeds the transforms in each worker from the worker's seed: no finding.
--loader torch: torch's DataLoader reseeds Python's, numpy's and torch's
generators in its workers but not the transforms' own RandomState, so both
workers start from the main process's state (worker_rng_shared), again at every
epoch (augmentation_repeats_across_epochs)."""
import argparse

import numpy as np
import torch
import torch.distributed as dist

import monai
from monai.data import Dataset, DistributedSampler
from monai.transforms import Compose, EnsureTyped, RandFlipd, RandSpatialCropd
from monai.utils import set_determinism


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loader", choices=["monai", "torch"], required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    set_determinism(seed=10 + rank)
    volumes = [{"image": np.full((1, 12, 12, 12), i, dtype=np.float32) + np.arange(12, dtype=np.float32)}
               for i in range(12)]
    transforms = Compose([RandSpatialCropd(keys="image", roi_size=(8, 8, 8), random_size=False),
                          RandFlipd(keys="image", prob=0.5, spatial_axis=0), EnsureTyped(keys="image")])
    transforms.set_random_state(seed=10 + rank)
    dataset = Dataset(volumes, transforms)
    sampler = DistributedSampler(dataset, shuffle=True)
    if args.loader == "monai":
        loader = monai.data.DataLoader(dataset, batch_size=2, sampler=sampler, num_workers=2)
    else:
        loader = torch.utils.data.DataLoader(dataset, batch_size=2, sampler=sampler, num_workers=2)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in loader:
            batch["image"].mean()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
