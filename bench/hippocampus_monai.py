#!/usr/bin/env python3
"""configs/hippocampus.json's recipe written in MONAI 1.4 and PyTorch DDP, beside volshard's own run
of it on the same split, machine and epochs (issue 44 item 1).

    bench/hippocampus_monai.py --bin build/bin/volshard [--data ../shared/data/msd_hippocampus]
                               [--out build/bench_hippocampus_monai] [--seeds N] [--epochs E] [--val-every N] [--side both]

MONAI's side, set up as the config says: LoadImaged, EnsureChannelFirstd, NormalizeIntensityd over
the volume, SpatialPadd to 32 (symmetric), all of it cached (CacheDataset); RandCropByPosNegLabeld
32^3 (pos 1, neg 1, 2 samples a volume), RandFlipd on each axis with probability 0.5; MONAI's UNet
16-32-64-128 (strides 2, 2 res units, instance norm), DiceCELoss(to_onehot_y, softmax), Adam at
0.002 with the poly schedule (power 0.9, per step), batch 2 volumes (4 crops) a rank, 190 epochs;
torch's DistributedSampler (shuffle, set_epoch) over 2 ranks on Gloo, one intra-op thread a rank
(this machine's 2 cores), 2 DataLoader workers a rank. Validation every 10 epochs over the last
fifth of dataset.json's training list (the trainer's Decathlon rule), sliding_window_inference
(roi 32, overlap 0.5, 4 windows a batch) and DiceMetric without the background, the ranks' shares
summed. volshard's side is bench/hippocampus.py's command. Both sides print Dice per class at each
validation; the table gives best and final mean Dice per class, wall, time to 0.85 and 0.86
(from the first epoch's start: the caches' fill is in wall), and peak RSS. With --seeds N each side
trains seeds 0..N-1 and the seed intervals follow (bench/seed_interval.py).
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import seed_interval
from scoring import DiceSums, decathlon_split

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIG = os.path.join(ROOT, "configs", "hippocampus.json")


def monai_rank(rank, world, args, config, seed, queue):
    """One DDP rank of MONAI's recipe; rank 0 puts its validations on `queue`."""
    import torch
    import torch.distributed as dist
    from monai.data import CacheDataset, DataLoader, partition_dataset
    from monai.inferers import sliding_window_inference
    from monai.losses import DiceCELoss
    from monai.metrics import DiceMetric
    from monai.networks.nets import UNet
    from monai.networks.utils import one_hot
    from monai.transforms import (Compose, EnsureChannelFirstd, EnsureTyped, LoadImaged, NormalizeIntensityd,
                                  RandCropByPosNegLabeld, RandFlipd, SpatialPadd)
    from monai.utils import set_determinism

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    train_items, val_items, names = decathlon_split(args.data, config["val_fraction"])
    keys = ["image", "label"]
    crop = config["crop"][0]
    prefix = [LoadImaged(keys=keys, image_only=True), EnsureChannelFirstd(keys=keys),
              NormalizeIntensityd(keys="image", nonzero=config["nonzero"], channel_wise=config["channel_wise"])]
    train_tf = Compose(prefix + [SpatialPadd(keys=keys, spatial_size=[config["spatial_pad"][0]] * 3),
                                 EnsureTyped(keys=keys, track_meta=False),
                                 RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=[crop] * 3, pos=1,
                                                        neg=1, num_samples=config["num_samples"]),
                                 RandFlipd(keys=keys, prob=config["flip_prob"], spatial_axis=0),
                                 RandFlipd(keys=keys, prob=config["flip_prob"], spatial_axis=1),
                                 RandFlipd(keys=keys, prob=config["flip_prob"], spatial_axis=2)])
    val_tf = Compose(prefix + [EnsureTyped(keys=keys, track_meta=False)])
    # Each rank its own augmentation stream (one seed on every rank would crop alike: the audit's
    # rank_rng_shared); the network's start is rank 0's, which DDP broadcasts.
    set_determinism(seed=seed * 1000 + rank)
    t_cache = time.perf_counter()
    train_ds = CacheDataset(train_items, train_tf, cache_rate=1.0, num_workers=1, progress=False)
    val_ds = CacheDataset(partition_dataset(val_items, num_partitions=world, shuffle=False,
                                            even_divisible=False)[rank], val_tf, cache_rate=1.0, num_workers=1,
                          progress=False)
    cache_seconds = time.perf_counter() - t_cache
    sampler = torch.utils.data.distributed.DistributedSampler(train_ds, num_replicas=world, rank=rank,
                                                              shuffle=True, seed=seed)
    loader = DataLoader(train_ds, batch_size=config["batch_size"], sampler=sampler, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    torch.manual_seed(seed)
    net = UNet(spatial_dims=3, in_channels=1, out_channels=config["out_channels"], channels=config["channels"],
               strides=config["strides"], num_res_units=config["res_units"], norm="instance")
    model = torch.nn.parallel.DistributedDataParallel(net)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    epochs = args.epochs or config["epochs"]
    total = epochs * len(loader)
    poly = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: (1 - min(1.0, step / total)) ** 0.9)
    dice = DiceMetric(include_background=False, reduction="none")
    classes = config["out_channels"]
    t0 = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        sampler.set_epoch(epoch)
        for batch in loader:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(batch["image"]), batch["label"])
            loss.backward()
            opt.step()
            poly.step()
        if (epoch + 1) % (args.val_every or config["val_every"]) != 0:
            continue
        model.eval()
        scores = DiceSums(classes - 1)
        with torch.no_grad():
            for v in val_ds:
                logits = sliding_window_inference(v["image"][None], [config["roi"][0]] * 3, config["sw_batch_size"],
                                                  net, overlap=config["overlap"])
                pred = one_hot(logits.argmax(1, keepdim=True), classes)
                scores.add(dice(y_pred=pred, y=one_hot(v["label"][None].round().long(), classes))[0])
        dice.reset()
        rows = torch.tensor(scores.rows(), dtype=torch.float64)
        dist.all_reduce(rows)
        scores = DiceSums.from_rows(rows.tolist())
        if rank == 0:
            queue.put({"epoch": epoch, "val_dice": scores.mean(), "val_dice_per_class": scores.per_class(),
                       "t": time.perf_counter() - t0})
    if rank == 0:
        queue.put({"done": True, "cache_seconds": cache_seconds})
    dist.destroy_process_group()


def run_monai(args, config, seed):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    t0 = time.monotonic()
    procs = [ctx.Process(target=monai_rank, args=(r, args.nproc, args, config, seed, queue)) for r in range(args.nproc)]
    for p in procs:
        p.start()
    records, cache_seconds = [], math.nan
    while True:
        item = queue.get()
        if item.get("done"):
            cache_seconds = item["cache_seconds"]
            break
        records.append(item)
        print(f"  MONAI seed {seed} epoch {item['epoch'] + 1}: " +
              " ".join(f"{d:.4f}" for d in item["val_dice_per_class"]) + f" mean {item['val_dice']:.4f} "
              f"at {item['t']:.0f} s", flush=True)
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        sys.exit(f"hippocampus_monai: a MONAI rank exited with {[p.exitcode for p in procs]}")
    wall = time.monotonic() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"validations": records, "wall": wall, "peak_rss": rss, "setup": cache_seconds}


def run_volshard(args, seed):
    out = os.path.join(args.out, f"volshard_seed{seed}")
    cmd = [args.bin, "train", "--config", CONFIG, "--datalist", os.path.join(args.data, "dataset.json"), "--out", out,
           "--overwrite", "--nproc-per-node", str(args.nproc), "--seed", str(seed)]
    if args.epochs:
        cmd += ["--epochs", str(args.epochs)]
    if args.val_every:
        cmd += ["--val-every", str(args.val_every)]
    t0 = time.monotonic()
    with open(out + ".log", "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    if code != 0:
        sys.exit(f"hippocampus_monai: volshard train exited with {code}: {open(out + '.log').read()[-2000:]}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    epochs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    epochs = [r for r in epochs if r.get("type") == "epoch"]
    records, t = [], 0.0
    for r in epochs:  # from the first epoch's start: an epoch's seconds hold its validation
        t += r["seconds"]
        if r.get("val_dice") is not None:
            records.append({"epoch": r["epoch"], "val_dice": r["val_dice"],
                            "val_dice_per_class": r["val_dice_per_class"], "t": t})
            print(f"  volshard seed {seed} epoch {r['epoch'] + 1}: " +
                  " ".join(f"{d:.4f}" for d in r["val_dice_per_class"]) + f" mean {r['val_dice']:.4f} at {t:.0f} s",
                  flush=True)
    return {"validations": records, "wall": wall, "peak_rss": rss, "setup": math.nan}


def reached(records, goal):
    for r in records:
        if r["val_dice"] >= goal:
            return f"{r['t']:.0f} s (epoch {r['epoch'] + 1})"
    return "not reached"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the volshard binary")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "msd_hippocampus"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench_hippocampus_monai"))
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2, help="MONAI's DataLoader workers a rank")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=0, help="fewer epochs than the config's (a smoke run)")
    ap.add_argument("--val-every", type=int, default=0, help="validate every N epochs, both sides (0: the config's)")
    ap.add_argument("--side", choices=["both", "monai", "volshard"], default="both")
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)  # SIDE:SEED, one run (internal)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.data, "dataset.json")):
        print(f"hippocampus_monai: skipped: {args.data}/dataset.json is absent")
        return 2
    os.makedirs(args.out, exist_ok=True)
    config = json.load(open(CONFIG))
    config.setdefault("nonzero", False)
    config.setdefault("val_fraction", 0.2)
    config.setdefault("channel_wise", False)
    config = {k: (v if not isinstance(v, int) or k not in ("crop", "roi", "spatial_pad") else [v])
              for k, v in config.items()}
    _, _, names = decathlon_split(args.data, config["val_fraction"])
    if args.one:  # one run in a process of its own, so that its peak RSS is its own
        side, seed = args.one.split(":")
        r = run_volshard(args, int(seed)) if side == "volshard" else run_monai(args, config, int(seed))
        with open(os.path.join(args.out, f"{side}_seed{seed}.json"), "w") as f:
            json.dump(r, f, indent=1)
        return 0
    sides = ["volshard", "monai"] if args.side == "both" else [args.side]
    results = {side: [] for side in sides}
    for seed in range(args.seeds):
        for side in sides:  # alternated, seed by seed
            print(f"{side}, seed {seed}:", flush=True)
            subprocess.run([sys.executable, os.path.abspath(__file__), "--one", f"{side}:{seed}"] +
                           [a for a in sys.argv[1:]], check=True)
            with open(os.path.join(args.out, f"{side}_seed{seed}.json")) as f:
                results[side].append(json.load(f))
    print(f"\n| side, seed | final: {', '.join(names)}, mean | best mean (epoch) | wall | to 0.85 | to 0.86 | "
          "peak RSS (largest process) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for side in sides:
        for seed, r in enumerate(results[side]):
            v = r["validations"]
            final, best = v[-1], max(v, key=lambda x: x["val_dice"])
            print(f"| {side}, {seed} | " + ", ".join(f"{d:.4f}" for d in final["val_dice_per_class"]) +
                  f", {final['val_dice']:.4f} | {best['val_dice']:.4f} ({best['epoch'] + 1}) | {r['wall']:.0f} s | "
                  f"{reached(v, 0.85)} | {reached(v, 0.86)} | {r['peak_rss']:.0f} MiB |")
    if args.seeds > 1:
        print("\nFinal mean foreground Dice over the seeds (mean, sd, Student's t 95 % interval):")
        finals = {side: [r["validations"][-1]["val_dice"] for r in results[side]] for side in sides}
        for side in sides:
            print(f"- {side}: {seed_interval.text(finals[side])}")
        if len(sides) == 2:
            d, lo, hi = seed_interval.difference(finals["volshard"], finals["monai"])
            print(f"- volshard - MONAI: {d:+.4f}, 95 % interval [{lo:+.4f}, {hi:+.4f}] (Welch)"
                  + (": within seed noise" if lo <= 0 <= hi else ": beyond seed noise"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
