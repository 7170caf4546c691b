"""numpy augmentation in DataLoader workers (num_workers=2).

--source global draws from numpy's global generator: torch reseeds it in every
worker at every epoch (since torch 1.9), so workers and epochs differ: no
finding. --source held draws from a RandomState the Dataset holds, seeded per
rank: every worker gets a copy at the same state (worker_rng_shared), and each
epoch's new workers copy it again from the main process, where it never moves
(augmentation_repeats_across_epochs). --persistent keeps the workers across
epochs: the held generator then still starts equal in both workers, but goes
on from epoch to epoch."""
import argparse

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Jittered(Dataset):
    def __init__(self, n, source, seed):
        self.base = np.arange(n * 8, dtype=np.float32).reshape(n, 8)
        self.source = source
        self.rng = np.random.RandomState(seed)

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        rng = np.random if self.source == "global" else self.rng
        return torch.from_numpy(self.base[i] + rng.normal(size=8).astype(np.float32))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", choices=["global", "held"], required=True)
    p.add_argument("--persistent", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1000 + rank)
    np.random.seed(1000 + rank)
    dataset = Jittered(16, args.source, seed=1000 + rank)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=2, sampler=sampler, num_workers=2,
                        persistent_workers=args.persistent)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in loader:
            batch.mean()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
