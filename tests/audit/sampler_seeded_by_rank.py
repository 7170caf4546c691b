"""A DistributedSampler seeded with the rank: each rank shuffles its own
permutation and takes its stride of it, so some indices are read by both ranks
and others by none in every epoch (shard_overlap, shard_gap)."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    dataset = TensorDataset(torch.arange(32, dtype=torch.float32).unsqueeze(1))
    sampler = DistributedSampler(dataset, shuffle=True, seed=rank)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            x.sum()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
