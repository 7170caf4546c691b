"""Training plus a validation pass per epoch over 5 volumes on 2 ranks. torch's
DistributedSampler(shuffle=False) pads the validation set to 6, so one volume
is scored twice and the mean over ranks counts it twice (padded_duplicates, an
error because the pass runs under torch.no_grad()). --even-divisible-false uses
MONAI's DistributedSampler(even_divisible=False): each volume once, no finding."""
import argparse

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--even-divisible-false", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    train_set = TensorDataset(torch.randn(16, 4))
    held_out = TensorDataset(torch.randn(5, 4))
    train_sampler = DistributedSampler(train_set, shuffle=True)
    train_loader = DataLoader(train_set, batch_size=4, sampler=train_sampler)
    if args.even_divisible_false:
        from monai.data import DistributedSampler as MonaiDistributedSampler
        holdout_sampler = MonaiDistributedSampler(held_out, shuffle=False, even_divisible=False)
    else:
        holdout_sampler = DistributedSampler(held_out, shuffle=False)
    holdout = DataLoader(held_out, batch_size=1, sampler=holdout_sampler)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        train_sampler.set_epoch(epoch)
        model.train()
        for (x,) in train_loader:
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        total = torch.zeros(2)
        with torch.no_grad():
            for (x,) in holdout:
                total += torch.stack([model(x).pow(2).sum(), torch.tensor(1.0)])
        dist.all_reduce(total)  # a mean over the scored volumes: padding counts one twice
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
