"""torch's DistributedSampler in the textbook DDP loop: set_epoch(epoch) before
each epoch, the same seed on every rank. --no-set-epoch forgets set_epoch, so
every epoch reads the order of epoch 0 (no_reshuffle)."""
import argparse

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Points(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.tensor([float(i), float(i % 3)])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--no-set-epoch", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    dataset = Points()
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    train_loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        if not args.no_set_epoch:
            sampler.set_epoch(epoch)
        for batch in train_loader:
            loss = model(batch).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
