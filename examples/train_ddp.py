#!/usr/bin/env python3
"""MONAI's DDP tutorial (unet_training_ddp.py) with PyTorch and volshard only.

Each process is one rank; rendezvous through the usual environment variables
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), as torchrun sets
them. Gloo on CPU, NCCL when CUDA is there. For example, two ranks by hand:

    volshard synth --out data --count 16 --size 64
    for r in 0 1; do MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r \\
        PYTHONPATH=build/python $(scripts/pyenv.sh --path)/bin/python examples/train_ddp.py --data data --crop 32 & done; wait
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import volshard


def block(cin, cout, stride):
    return nn.Sequential(nn.Conv3d(cin, cout, 3, stride=stride, padding=1), nn.BatchNorm3d(cout), nn.PReLU())


class UNet(nn.Module):
    """MONAI's UNet layout (spatial_dims 3, strides 2, one conv unit per level,
    transposed-conv up path with skip connections), in plain torch."""

    def __init__(self, channels=(16, 32, 64, 128, 256)):
        super().__init__()
        self.down = nn.ModuleList()
        cin = 1
        for k, c in enumerate(channels):
            self.down.append(block(cin, c, 1 if k == len(channels) - 1 else 2))
            cin = c
        self.up = nn.ModuleList()
        for k in range(len(channels) - 2, -1, -1):
            cout = channels[k - 1] if k > 0 else 1
            self.up.append(nn.ConvTranspose3d(cin + channels[k], cout, 3, stride=2, padding=1, output_padding=1))
            cin = cout

    def forward(self, x):
        skips = []
        for d in self.down:
            x = d(x)
            skips.append(x)
        x = skips.pop()
        for u in self.up:
            x = u(torch.cat([x, skips.pop()], 1))
        return x


def dice_loss(logits, target, eps=1e-5):
    """MONAI's DiceLoss(sigmoid=True): mean over batch and channel of 1 - Dice."""
    p = torch.sigmoid(logits)
    dims = tuple(range(2, p.dim()))
    inter = (p * target).sum(dims)
    return (1 - (2 * inter + eps) / (p.sum(dims) + target.sum(dims) + eps)).mean()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder of img*/seg* NIfTI pairs, or a datalist .json")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--crop", type=int, default=96)
    ap.add_argument("--num-samples", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--channels", default="16,32,64,128,256")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="", help="checkpoint folder (rank 0 writes ckpt.pt each epoch)")
    ap.add_argument("--indices-out", default="", help="write the dataset indices this rank saw as JSON")
    args = ap.parse_args()

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(volshard.SeedStreams(args.seed).shared_seed(0))  # same initial weights everywhere

    pairs = volshard.pairs_from_datalist(args.data) if args.data.endswith(".json") else \
        volshard.pairs_from_folder(args.data)
    sampler = volshard.DistributedSampler(len(pairs), shuffle=True, seed=args.seed)  # rank/world from dist
    loader = volshard.Loader(pairs, sampler, crop=args.crop, num_samples=args.num_samples,
                             batch_size=args.batch_size, workers=args.workers, cache_rate=1.0,
                             device=device)  # batches arrive on the device, copied one ahead
    model = DistributedDataParallel(UNet(tuple(int(c) for c in args.channels.split(","))).to(device))
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    start_epoch = 0
    ckpt = os.path.join(args.out, "ckpt.pt") if args.out else ""
    if ckpt and os.path.exists(ckpt):
        state = torch.load(ckpt, map_location=device)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        loader.load_state_dict(state["data"])
        start_epoch = state["data"]["epoch"] + 1

    seen = []
    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)
        model.train()
        total, steps = 0.0, 0
        for batch in loader:
            seen.extend(batch["index"])
            opt.zero_grad()
            loss = dice_loss(model(batch["image"]), batch["label"])
            loss.backward()
            opt.step()
            total, steps = total + loss.item(), steps + 1
        mean = torch.tensor([total / max(steps, 1)])
        dist.all_reduce(mean)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {mean.item() / dist.get_world_size():.4f}", flush=True)
            if ckpt:
                os.makedirs(args.out, exist_ok=True)
                torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                            "data": loader.state_dict()}, ckpt)
    if args.indices_out:
        with open(args.indices_out, "w") as f:
            json.dump({"rank": rank, "world_size": dist.get_world_size(), "indices": seen}, f)
    loader.close()
    # Every rank leaves together: none tears its Gloo pairs down while another
    # is still saving or reducing (torch's advice: destroy on every rank, last).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
