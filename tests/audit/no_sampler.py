"""A DDP script that forgot the DistributedSampler: every rank reads the whole
dataset each epoch (shard_overlap). Shuffled with a seed per rank, the ranks at
least read it in different orders; --no-shuffle reads it in the same order on
every rank too (same_order_across_ranks)."""
import argparse

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--no-shuffle", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(100 + dist.get_rank())
    dataset = TensorDataset(torch.randn(24, 3), torch.randint(0, 2, (24,)))
    loader = DataLoader(dataset, batch_size=6, shuffle=not args.no_shuffle)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
