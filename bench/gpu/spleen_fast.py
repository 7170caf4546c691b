"""The spleen fast-training recipe on one GPU: `volshard train --config configs/spleen.json` with the
cache and augmentation on the GPU (--cache-device cuda) and AMP, against MONAI's own recipe
(fast_training_tutorial: CacheDataset, ToDeviced, the random crops, flips, rotations and intensity
shift on the GPU, ThreadDataLoader, UNet with batch norm, DiceCELoss, AMP) on the same synthetic
Decathlon CT folder and the same GPU, in the same run (both pad a case that the foreground crop
left under the crop size, as SpatialPadd): seconds per epoch (the first epoch, which
caches and tunes cuDNN, left out) with validation after every epoch (the same fifth of the cases,
sliding windows of the config's roi, Dice without the background), the validation Dice of each epoch,
for two seeds per side, and the caches' setup time.

  python bench/gpu/spleen_fast.py --bin BUILD/bin/volshard --out DIR [--device cuda] [--quick]

`--device cpu --quick` runs both sides small on a CPU: a dry run of this script, not a figure.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def run(cmd, check=True):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    return p


def monai_recipe(train_items, val_items, args, crop, roi, epochs, batch_size, seeds):
    """MONAI's fast-training tutorial, its transforms and loop, on `train_items`, validated on
    `val_items` after every epoch (sliding window, DiceMetric without the background) for each seed:
    the caches' setup seconds, and per seed the seconds and validation Dice of each epoch."""
    import torch
    from monai.data import CacheDataset, ThreadDataLoader, decollate_batch
    from monai.inferers import sliding_window_inference
    from monai.losses import DiceCELoss
    from monai.metrics import DiceMetric
    from monai.networks.layers import Norm
    from monai.networks.nets import UNet
    from monai.transforms import (AsDiscrete, Compose, CropForegroundd, EnsureChannelFirstd, EnsureTyped,
                                  FgBgToIndicesd, LoadImaged, Orientationd, RandCropByPosNegLabeld, RandFlipd,
                                  RandRotate90d, RandShiftIntensityd, ScaleIntensityRanged, Spacingd, SpatialPadd,
                                  ToDeviced)
    from monai.utils import set_determinism
    device = torch.device(args.device)
    keys = ["image", "label"]
    prefix = [
        LoadImaged(keys=keys), EnsureChannelFirstd(keys=keys),
        ScaleIntensityRanged(keys=["image"], a_min=-57, a_max=164, b_min=0.0, b_max=1.0, clip=True),
        CropForegroundd(keys=keys, source_key="image"),
        Orientationd(keys=keys, axcodes="RAS"),
        Spacingd(keys=keys, pixdim=(1.5, 1.5, 2.0), mode=("bilinear", "nearest"))]
    transforms = Compose(prefix + [
        SpatialPadd(keys=keys, spatial_size=(crop,) * 3),  # volshard's --spatial-pad: a cropped case under 96
        FgBgToIndicesd(keys="label", fg_postfix="_fg", bg_postfix="_bg", image_key="image"),
        EnsureTyped(keys=keys, track_meta=False),
        ToDeviced(keys=keys, device=device),
        RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=(crop,) * 3, pos=1, neg=1, num_samples=4,
                               fg_indices_key="label_fg", bg_indices_key="label_bg"),
        RandFlipd(keys=keys, prob=0.5, spatial_axis=0), RandFlipd(keys=keys, prob=0.5, spatial_axis=1),
        RandFlipd(keys=keys, prob=0.5, spatial_axis=2), RandRotate90d(keys=keys, prob=0.5, max_k=3),
        RandShiftIntensityd(keys="image", offsets=0.1, prob=0.5)])
    val_transforms = Compose(prefix + [EnsureTyped(keys=keys, track_meta=False), ToDeviced(keys=keys, device=device)])
    t0 = time.perf_counter()
    ds = CacheDataset(train_items, transforms, cache_rate=1.0, num_workers=8, copy_cache=False, progress=False)
    val_ds = CacheDataset(val_items, val_transforms, cache_rate=1.0, num_workers=8, copy_cache=False,
                          progress=False)
    setup = time.perf_counter() - t0
    channels = (4, 8, 16, 32) if args.quick else (16, 32, 64, 128, 256)
    strides = (2, 2, 2) if args.quick else (2, 2, 2, 2)
    cuda = device.type == "cuda"
    post_pred, post_label = AsDiscrete(argmax=True, to_onehot=2), AsDiscrete(to_onehot=2)
    runs = {}
    for seed in seeds:
        set_determinism(seed=seed)
        loader = ThreadDataLoader(ds, num_workers=0, batch_size=batch_size, shuffle=True)
        val_loader = ThreadDataLoader(val_ds, num_workers=0, batch_size=1)
        net = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=channels, strides=strides,
                   num_res_units=2, norm=Norm.BATCH).to(device)
        loss_fn = DiceCELoss(to_onehot_y=True, softmax=True, squared_pred=True, batch=True)
        opt = torch.optim.Adam(net.parameters(), 1e-4)
        scaler = torch.amp.GradScaler(device.type, enabled=cuda)
        dice_metric = DiceMetric(include_background=False, reduction="mean")
        seconds, dice = [], []
        for _ in range(epochs):
            t0 = time.perf_counter()
            net.train()
            for b in loader:
                opt.zero_grad(set_to_none=True)
                with torch.autocast(device.type, dtype=torch.float16 if cuda else torch.bfloat16):
                    logits = net(b["image"])
                loss = loss_fn(logits.float(), b["label"])
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            net.eval()
            with torch.no_grad():  # float32, as volshard validates
                for v in val_loader:
                    out = sliding_window_inference(v["image"], (roi,) * 3, 4, net, overlap=0.25)
                    dice_metric(y_pred=[post_pred(i) for i in decollate_batch(out)],
                                y=[post_label(i) for i in decollate_batch(v["label"])])
            dice.append(dice_metric.aggregate().item())
            dice_metric.reset()
            if cuda:
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - t0)
        runs[seed] = (seconds, dice)
    return setup, runs


def curve(values):
    return " ".join(f"{v:.3f}" for v in values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per side (0, 1, ...)")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    config = os.path.join(here, "..", "..", "configs", "spleen.json")
    os.makedirs(args.out, exist_ok=True)
    count, size, crop, roi, epochs, batch = (6, 96, 16, 16, 3, 2) if args.quick else (24, 256, 96, 160, 10, 4)
    seeds = list(range(args.seeds))
    data = os.path.join(args.out, "Task09")
    if not os.path.isdir(data):
        run([args.bin, "synth", "--kind", "ct", "--out", data, "--count", count, "--size", size, "--seed", 0])
    # One split for both sides: the last fifth of the cases validates (a datalist with both lists).
    with open(os.path.join(data, "dataset.json")) as f:
        listed = json.load(f)["training"]
    n_val = max(1, len(listed) // 5)
    datalist = os.path.join(data, "split.json")
    with open(datalist, "w") as f:
        json.dump({"training": listed[:-n_val], "validation": listed[-n_val:]}, f, indent=1)

    def items(entries):
        return [{"image": os.path.normpath(os.path.join(data, d["image"])),
                 "label": os.path.normpath(os.path.join(data, d["label"]))} for d in entries]

    train_items, val_items = items(listed[:-n_val]), items(listed[-n_val:])
    small = ["--channels", "4,8,16,32", "--strides", "2,2,2"] if args.quick else []
    amp = "bf16" if args.device == "cpu" else "fp16"
    ours = {}
    for seed in seeds:
        out = os.path.join(args.out, f"volshard_seed{seed}")
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        run([args.bin, "train", "--config", config, "--datalist", datalist, "--out", out, "--val-every", 1,
             "--epochs", epochs, "--batch-size", batch, "--crop", crop, "--roi", roi, "--device", args.device,
             "--cache-device", "device", "--amp", amp, "--spatial-pad", crop, "--flip-prob", 0.5,
             "--rot90-prob", 0.5, "--rand-shift", 0.1, "--seed", seed,
             "--loss", "dicece", "--squared-pred", "--workers", 0, "--nproc-per-node", 1, "--no-fingerprints",
             *small])
        wall = time.perf_counter() - t0
        with open(os.path.join(out, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f if '"type":"epoch"' in line.replace(" ", "")]
        ours[seed] = ([l["seconds"] for l in lines], [l["val_dice"] for l in lines], wall)
    rows = []
    try:
        setup, theirs = monai_recipe(train_items, val_items, args, crop, roi, epochs, batch, seeds)
    except ImportError as e:
        setup, theirs = None, {}
        rows.append(f"| MONAI not importable: {e} | | | |")
    what = (f"{len(train_items)} CT cases {size} x {size} x {size // 4} ({len(val_items)} validate), {crop}^3 x 4 "
            f"crops, batch {batch}, {amp}, {epochs} epochs")
    rows.insert(0, f"| spleen fast-training recipe: {what} | volshard | MONAI's recipe | ratio |")
    rows.insert(1, "| --- | --- | --- | --- |")
    for seed in seeds:
        mine = statistics.median(ours[seed][0][1:])  # the first epoch caches and tunes cuDNN
        row = f"| seed {seed}: s/epoch with validation (median of epochs 2-{epochs}) | {mine:.2f} s (whole run " \
              f"{ours[seed][2]:.0f} s) | "
        if seed in theirs:
            t = statistics.median(theirs[seed][0][1:])
            row += f"{t:.2f} s (its caches {setup:.1f} s) | {t / mine:.2f}x |"
        else:
            row += " | |"
        rows.append(row)
        rows.append(f"| seed {seed}: validation Dice per epoch | {curve(ours[seed][1])} | "
                    f"{curve(theirs[seed][1]) if seed in theirs else ''} | |")
    for row in rows:
        print(row, flush=True)
    with open(os.path.join(args.out, "spleen_fast.md"), "w") as f:
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
