#!/usr/bin/env python3
"""configs/hippocampus_augmented.json's training feed against the same transforms in MONAI 1.4, on
the Decathlon's Hippocampus (real scans, ../shared/data), the loader alone (issue 42 item 6).

MONAI: LoadImaged, EnsureChannelFirstd, NormalizeIntensityd (the volume), SpatialPadd(32), then
RandCropByPosNegLabeld(32^3, pos 1, neg 1, 2 samples), RandAffined(prob 0.2, rotate 0.5236 and
scale 0.3 on each axis, bilinear image, nearest label, reflection padding), RandFlipd on each axis
(prob 0.5), RandGaussianNoised(prob 0.1, std 0.1), RandGaussianSmoothd(prob 0.2, sigma 0.5..1 on
each axis), RandScaleIntensityd(0.25, prob 0.15), RandAdjustContrastd(prob 0.3, gamma 0.7..1.5):
the config's steps in volshard's order (docs/reproducibility.md), through torch's DataLoader
(2 worker processes, batch 2, list_data_collate); cached: CacheDataset over the deterministic
prefix (cache_rate 1, 2 threads). volshard: volshard.Loader(pipeline=the config, 2 threads,
batch 2), from files (cache_rate 0) and cached (cache_rate 1).

Each (side, source) runs in a fresh Python process, the sides alternated, rounds repeated: wall and
CPU (the process and its worker processes) per volume over the epochs after the set-up, and peak
RSS. With `--config configs/hippocampus.json` (no augmentation but the flips) MONAI's side drops
the steps that config turns off.

usage: $(scripts/pyenv.sh --path)/bin/python bench/hippocampus_pipeline.py [--bin build/bin/volshard] \\
           [--data ../shared/data/msd_hippocampus] [--volumes 104] [--epochs 2] [--rounds 2] [--config FILE]
(the volshard module is the one built beside --bin, in BIN/../python)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = f"import sys\nsys.path.insert(0, {HERE!r})\n" + r"""
import json, os, sys, time
import torch
from feed_timing import peak_mb, timed_epochs, volshard_epochs
side, source, items_file, config_path, epochs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
torch.set_num_threads(1)
items = json.load(open(items_file))
config = json.load(open(config_path))


out = {}
if side == "monai":
    from monai.data import CacheDataset, Dataset, list_data_collate
    from monai.transforms import (Compose, EnsureChannelFirstd, LoadImaged, NormalizeIntensityd, RandAdjustContrastd,
                                  RandAffined, RandCropByPosNegLabeld, RandFlipd, RandGaussianNoised,
                                  RandGaussianSmoothd, RandScaleIntensityd, SpatialPadd)
    from monai.utils import set_determinism
    set_determinism(seed=0)
    keys = ["image", "label"]
    c = config
    pad, crop = c["spatial_pad"] * (3 // len(c["spatial_pad"])), c["crop"]
    crop = [crop] * 3 if isinstance(crop, int) else crop * (3 // len(crop))
    prefix = [LoadImaged(keys=keys), EnsureChannelFirstd(keys=keys), NormalizeIntensityd(keys=["image"]),
              SpatialPadd(keys=keys, spatial_size=pad)]
    random = [RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=crop, pos=1, neg=1,
                                     num_samples=c["num_samples"], image_key="image", image_threshold=0)]
    if c.get("affine_prob", 0) > 0:
        random.append(RandAffined(keys=keys, prob=c["affine_prob"], rotate_range=c["affine_rotate"] * 3,
                                  scale_range=c["affine_scale"] * 3, mode=("bilinear", "nearest"),
                                  padding_mode="reflection"))
    random += [RandFlipd(keys=keys, prob=c["flip_prob"], spatial_axis=a) for a in range(3)]
    if c.get("noise_prob", 0) > 0:
        random.append(RandGaussianNoised(keys=["image"], prob=c["noise_prob"], std=c["noise_std"]))
    if c.get("smooth_prob", 0) > 0:
        random.append(RandGaussianSmoothd(keys=["image"], prob=c["smooth_prob"], sigma_x=c["smooth_sigma_x"],
                                          sigma_y=c["smooth_sigma_y"], sigma_z=c["smooth_sigma_z"]))
    if c.get("rand_scale_prob", 0) > 0 and c.get("rand_scale", 0) > 0:
        random.append(RandScaleIntensityd(keys=["image"], factors=c["rand_scale"], prob=c["rand_scale_prob"]))
    if c.get("contrast_prob", 0) > 0:
        random.append(RandAdjustContrastd(keys=["image"], prob=c["contrast_prob"], gamma=c["contrast_gamma"]))
    t0 = time.perf_counter()
    if source == "cached":
        ds = CacheDataset(items, Compose(prefix + random), cache_rate=1.0, num_workers=2, progress=False)
    else:
        ds = Dataset(items, Compose(prefix + random))
    out["setup"] = time.perf_counter() - t0
    loader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True, num_workers=2, collate_fn=list_data_collate)
    out.update(timed_epochs(loader, epochs))
else:
    import volshard
    volshard.tune_allocator_for_volumes()  # as python/README.md's recipe, before any loader
    out = volshard_epochs(items, config_path, source == "cached", epochs)
out["peak_mb"] = peak_mb()
print(json.dumps(out))
"""

STEPS = [("affine_prob", "RandAffine"), ("flip_prob", "RandFlip x3"), ("noise_prob", "RandGaussianNoise"),
         ("smooth_prob", "RandGaussianSmooth"), ("rand_scale_prob", "RandScaleIntensity"),
         ("contrast_prob", "RandAdjustContrast")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "volshard"),
                    help="the built volshard; its module is BIN/../python")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "msd_hippocampus"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "hippocampus_augmented.json"))
    ap.add_argument("--volumes", type=int, default=104, help="the first N cases of dataset.json's training list")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench_hippocampus_pipeline"))
    a = ap.parse_args()
    datalist = os.path.join(a.data, "dataset.json")
    if not os.path.exists(datalist):
        print(f"hippocampus pipeline bench: skipped: {datalist} is absent (the Decathlon's Task04; "
              "CI has it in ../shared/data beside the clone)")
        return 2
    with open(datalist) as f:
        cases = json.load(f)["training"][:a.volumes]
    items = [{k: os.path.normpath(os.path.join(a.data, c[k])) for k in ("image", "label")} for c in cases]
    os.makedirs(a.out, exist_ok=True)
    items_file = os.path.join(a.out, "items.json")
    with open(items_file, "w") as f:
        json.dump(items, f)
    config = json.load(open(a.config))
    steps = ", ".join(f"{name} p {config[key]}" for key, name in STEPS if config.get(key, 0) > 0)
    print(f"Hippocampus training feed ({os.path.basename(a.config)}: pos/neg crops {config['crop']}, "
          f"{config['num_samples']} a case; {steps}) on the first {len(items)} Task04 cases, batch 2, 2 workers "
          f"(MONAI: processes, volshard: threads), {a.epochs} epochs, median of {a.rounds} alternated rounds")
    module = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(a.bin)), "..", "python"))
    if not os.path.isdir(module):
        sys.exit(f"--bin {a.bin}: no built volshard module in {module} (build the project first)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [module, os.environ.get("PYTHONPATH")])))
    results = {}
    for r in range(a.rounds):
        for source in ("files", "cached"):
            for side in (("monai", "volshard") if r % 2 == 0 else ("volshard", "monai")):
                p = subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD, side, source, items_file, a.config,
                                    str(a.epochs)], capture_output=True, text=True, env=env)
                if p.returncode != 0:
                    sys.exit(f"{side} {source} failed:\n{p.stderr[-3000:]}")
                results.setdefault((source, side), []).append(json.loads(p.stdout.strip().splitlines()[-1]))
    n = len(items) * a.epochs
    print(f"{'source':8} {'side':9} | {'wall s/vol':>10} {'CPU s/vol':>10} {'peak MB':>8} | {'wall ratio':>10} {'CPU ratio':>9}")
    print("-" * 72)
    for source in ("files", "cached"):
        row = {}
        for side in ("monai", "volshard"):
            rs = results[(source, side)]
            row[side] = (statistics.median(x["wall"] for x in rs) / n, statistics.median(x["cpu"] for x in rs) / n,
                         max(x["peak_mb"] for x in rs))
            ratio = (f"{row['monai'][0] / row[side][0]:9.1f}x {row['monai'][1] / row[side][1]:8.1f}x"
                     if side == "volshard" else "")
            print(f"{source:8} {side:9} | {row[side][0]:10.4f} {row[side][1]:10.4f} {row[side][2]:8.0f} | {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
