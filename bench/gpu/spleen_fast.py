"""The spleen fast-training recipe on one GPU: `volshard train --config configs/spleen.json` with the
cache and augmentation on the GPU (--cache-device cuda) and AMP, against MONAI's own recipe
(fast_training_tutorial: CacheDataset, ToDeviced, the random crops, flips, rotations and intensity
shift on the GPU, ThreadDataLoader, UNet with batch norm, DiceCELoss, AMP) on the same synthetic
Decathlon CT folder and the same GPU, in the same run (both pad a case that the foreground crop
left under the crop size, as SpatialPadd): seconds per epoch (the first epoch, which
caches and tunes cuDNN, left out) and the cache's setup time.

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


def monai_recipe(items, args, crop, epochs, batch_size):
    """MONAI's fast-training tutorial, its transforms and loop, on `items`; seconds of each epoch."""
    import torch
    from monai.data import CacheDataset, ThreadDataLoader
    from monai.losses import DiceCELoss
    from monai.networks.layers import Norm
    from monai.networks.nets import UNet
    from monai.transforms import (Compose, CropForegroundd, EnsureChannelFirstd, EnsureTyped, FgBgToIndicesd,
                                  LoadImaged, Orientationd, RandCropByPosNegLabeld, RandFlipd, RandRotate90d,
                                  RandShiftIntensityd, ScaleIntensityRanged, Spacingd, SpatialPadd, ToDeviced)
    from monai.utils import set_determinism
    set_determinism(seed=0)
    device = torch.device(args.device)
    keys = ["image", "label"]
    transforms = Compose([
        LoadImaged(keys=keys), EnsureChannelFirstd(keys=keys),
        ScaleIntensityRanged(keys=["image"], a_min=-57, a_max=164, b_min=0.0, b_max=1.0, clip=True),
        CropForegroundd(keys=keys, source_key="image"),
        Orientationd(keys=keys, axcodes="RAS"),
        Spacingd(keys=keys, pixdim=(1.5, 1.5, 2.0), mode=("bilinear", "nearest")),
        SpatialPadd(keys=keys, spatial_size=(crop,) * 3),  # volshard's --spatial-pad: a cropped case under 96
        FgBgToIndicesd(keys="label", fg_postfix="_fg", bg_postfix="_bg", image_key="image"),
        EnsureTyped(keys=keys, track_meta=False),
        ToDeviced(keys=keys, device=device),
        RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=(crop,) * 3, pos=1, neg=1, num_samples=4,
                               fg_indices_key="label_fg", bg_indices_key="label_bg"),
        RandFlipd(keys=keys, prob=0.5, spatial_axis=0), RandFlipd(keys=keys, prob=0.5, spatial_axis=1),
        RandFlipd(keys=keys, prob=0.5, spatial_axis=2), RandRotate90d(keys=keys, prob=0.5, max_k=3),
        RandShiftIntensityd(keys="image", offsets=0.1, prob=0.5)])
    t0 = time.perf_counter()
    ds = CacheDataset(items, transforms, cache_rate=1.0, num_workers=8, copy_cache=False, progress=False)
    setup = time.perf_counter() - t0
    loader = ThreadDataLoader(ds, num_workers=0, batch_size=batch_size, shuffle=True)
    channels = (4, 8, 16, 32) if args.quick else (16, 32, 64, 128, 256)
    strides = (2, 2, 2) if args.quick else (2, 2, 2, 2)
    net = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=channels, strides=strides, num_res_units=2,
               norm=Norm.BATCH).to(device)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True, squared_pred=True, batch=True)
    opt = torch.optim.Adam(net.parameters(), 1e-4)
    cuda = device.type == "cuda"
    scaler = torch.amp.GradScaler(device.type, enabled=cuda)
    seconds = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        for b in loader:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.float16 if cuda else torch.bfloat16):
                logits = net(b["image"])
            loss = loss_fn(logits.float(), b["label"])
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
    return setup, seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    config = os.path.join(here, "..", "..", "configs", "spleen.json")
    os.makedirs(args.out, exist_ok=True)
    count, size, crop, epochs, batch = (6, 96, 16, 3, 2) if args.quick else (32, 256, 96, 6, 4)
    data = os.path.join(args.out, "Task09")
    if not os.path.isdir(data):
        run([args.bin, "synth", "--kind", "ct", "--out", data, "--count", count, "--size", size, "--seed", 0])
    datalist = os.path.join(data, "dataset.json")
    out = os.path.join(args.out, "volshard_run")
    shutil.rmtree(out, ignore_errors=True)
    small = ["--channels", "4,8,16,32", "--strides", "2,2,2"] if args.quick else []
    amp = "bf16" if args.device == "cpu" else "fp16"
    t0 = time.perf_counter()
    run([args.bin, "train", "--config", config, "--datalist", datalist, "--out", out, "--val-every", 0,
         "--epochs", epochs, "--batch-size", batch, "--crop", crop, "--device", args.device,
         "--cache-device", "device", "--amp", amp, "--spatial-pad", crop, "--flip-prob", 0.5, "--rot90-prob", 0.5,
         "--rand-shift", 0.1,
         "--loss", "dicece", "--squared-pred", "--workers", 0, "--nproc-per-node", 1, "--no-fingerprints", *small])
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    with open(datalist) as f:
        items = [{"image": os.path.normpath(os.path.join(data, d["image"])),
                  "label": os.path.normpath(os.path.join(data, d["label"]))} for d in json.load(f)["training"]]
    # An epoch's seconds: its crops (every case once, 4 crops each; --val-every 0 holds none out) over its rate.
    ours = statistics.median(len(items) * 4 / l["samples_per_s"] for l in lines if l["type"] == "epoch"
                             and l["epoch"] > 0)
    try:
        setup, seconds = monai_recipe(items, args, crop, epochs, batch)
        theirs = statistics.median(seconds[1:])
        baseline = f"{theirs:.2f} s (MONAI's recipe; its cache {setup:.1f} s) | {theirs / ours:.2f}x"
    except ImportError as e:
        baseline = f"MONAI not importable: {e} |"
    row = (f"| spleen fast-training recipe, {len(items)} CT cases {size} x {size} x {size // 4}, {crop}^3 x 4 crops, "
           f"batch {batch}, {amp}, s/epoch | {ours:.2f} s (whole run {wall:.0f} s) | {baseline} |")
    print(row, flush=True)
    with open(os.path.join(args.out, "spleen_fast.md"), "w") as f:
        f.write(row + "\n")


if __name__ == "__main__":
    main()
