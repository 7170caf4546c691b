#!/usr/bin/env python3
"""The spleen pipeline side by side with MONAI 1.4 running its notebook's own transforms, in the
same run, on the same synthetic Decathlon CT folder (`volshard synth --kind ct`).

MONAI: LoadImaged, EnsureChannelFirstd, ScaleIntensityRanged(-57, 164 -> 0, 1, clip),
CropForegroundd, Orientationd(RAS), Spacingd(1.5, 1.5, 2), RandCropByPosNegLabeld(96^3, pos 1,
neg 1, 4 samples), through torch's DataLoader (2 worker processes, batch 2, list_data_collate);
cached: CacheDataset(cache_rate 1, 2 threads) and the same DataLoader.
volshard: volshard.Loader(pipeline="configs/spleen.json", 2 threads, batch 2), from files
(cache_rate 0) and cached (cache_rate 1).

MONAI runs twice: as its users run it, and with glibc's malloc tuned (GLIBC_TUNABLES) as
volshard's tune_allocator_for_volumes() tunes it, which python/README.md's recipe calls.
Each (side, source) runs in a fresh Python process, the sides alternated, so that peak RSS and
CPU seconds are each its own: wall and CPU (the process and its worker processes) per volume, the
prefix alone per case (one thread, no crops: MONAI's Compose of the deterministic steps, volshard's
`prepare`-equal prefix), and peak RSS (the process's VmHWM, MONAI's worker processes' too).

`--augment` adds the same augmentations to both sides after the crop, each with prob 1 so that
both do the same work: MONAI's RandAffined(rotate 0.26 rad and scale 0.1 on each axis, bilinear
image, nearest label, zeros padding), RandGaussianNoised(std 0.1), RandGaussianSmoothd,
RandScaleIntensityd(0.1), RandShiftIntensityd(0.1), RandAdjustContrastd (MONAI's defaults
otherwise); volshard's same options in its pipeline (RandAffine sampled around the crop), and it
runs the files and cached sources only (the prefix is unchanged). `--augment elastic` puts
Rand3DElasticd(sigma 5-8, magnitude 100-200, the same rotation and scale) in RandAffined's place, and
volshard's `elastic_prob` 1 in `affine_prob`'s.

`--steps` measures instead each of those augmentations alone after the cached crops (and
RandBiasFieldd with MONAI's defaults, volshard's `bias_prob` 1), both sides in fresh processes
alternated: CPU ms a crop above the crop alone's, where each side's time goes.

usage: PYTHONPATH=build/python $(scripts/pyenv.sh --path)/bin/python bench/spleen_monai.py \
           --bin build/bin/volshard [--volumes 8] [--size 384] [--cube N] [--epochs 2] [--rounds 2]
           [--augment [elastic] | --steps]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "..", "configs", "spleen.json")

CHILD = f"import sys\nsys.path.insert(0, {HERE!r})\n" + r"""
import json, os, sys, time
import torch
from feed_timing import cpu, peak_mb, timed_epochs, volshard_epochs
side, source, datalist, config, epochs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
steps = [x for x in sys.argv[6].split(",") if x]  # augmentation steps after the crop, each prob 1
torch.set_num_threads(1)
with open(datalist) as f:
    root = os.path.dirname(datalist)
    items = [{"image": os.path.normpath(os.path.join(root, d["image"])),
              "label": os.path.normpath(os.path.join(root, d["label"]))} for d in json.load(f)["training"]]


out = {}
if side.startswith("monai"):
    from monai.data import CacheDataset, Dataset, list_data_collate
    from monai.transforms import (Compose, CropForegroundd, EnsureChannelFirstd, LoadImaged, Orientationd,
                                  RandCropByPosNegLabeld, ScaleIntensityRanged, Spacingd)
    from monai.utils import set_determinism
    set_determinism(seed=0)
    prefix = [LoadImaged(keys=["image", "label"]), EnsureChannelFirstd(keys=["image", "label"]),
              ScaleIntensityRanged(keys=["image"], a_min=-57, a_max=164, b_min=0.0, b_max=1.0, clip=True),
              CropForegroundd(keys=["image", "label"], source_key="image"),
              Orientationd(keys=["image", "label"], axcodes="RAS"),
              Spacingd(keys=["image", "label"], pixdim=(1.5, 1.5, 2.0), mode=("bilinear", "nearest"))]
    if source == "prefix":
        t0, c0 = time.perf_counter(), cpu()
        Compose(prefix)(items[0])
        t0, c0 = time.perf_counter(), cpu()
        for it in items:
            Compose(prefix)(it)
        out = {"wall": time.perf_counter() - t0, "cpu": cpu() - c0}
    else:
        crop = [RandCropByPosNegLabeld(keys=["image", "label"], label_key="label", spatial_size=(96, 96, 96), pos=1,
                                       neg=1, num_samples=4, image_key="image", image_threshold=0)]
        from monai.transforms import (Rand3DElasticd, RandAdjustContrastd, RandAffined, RandBiasFieldd,
                                      RandGaussianNoised, RandGaussianSmoothd, RandScaleIntensityd,
                                      RandShiftIntensityd)
        monai_steps = {
            "affine": [RandAffined(keys=["image", "label"], prob=1.0, rotate_range=(0.26, 0.26, 0.26),
                                   scale_range=(0.1, 0.1, 0.1), mode=("bilinear", "nearest"), padding_mode="zeros")],
            "elastic": [Rand3DElasticd(keys=["image", "label"], sigma_range=(5, 8), magnitude_range=(100, 200),
                                       prob=1.0, rotate_range=(0.26, 0.26, 0.26), scale_range=(0.1, 0.1, 0.1),
                                       mode=("bilinear", "nearest"), padding_mode="zeros")],
            "noise": [RandGaussianNoised(keys=["image"], prob=1.0, std=0.1)],
            "smooth": [RandGaussianSmoothd(keys=["image"], prob=1.0)],
            "scale_shift": [RandScaleIntensityd(keys=["image"], factors=0.1, prob=1.0),
                            RandShiftIntensityd(keys=["image"], offsets=0.1, prob=1.0)],
            "contrast": [RandAdjustContrastd(keys=["image"], prob=1.0)],
            "bias": [RandBiasFieldd(keys=["image"], prob=1.0)],
        }
        for step in steps:
            crop += monai_steps[step]
        t0, c0 = time.perf_counter(), cpu()
        if source == "cached":
            ds = CacheDataset(items, Compose(prefix + crop), cache_rate=1.0, num_workers=2, progress=False)
        else:
            ds = Dataset(items, Compose(prefix + crop))
        out["setup"] = time.perf_counter() - t0
        loader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True, num_workers=2,
                                             collate_fn=list_data_collate)
        out.update(timed_epochs(loader, epochs))
else:
    import volshard
    volshard.tune_allocator_for_volumes()  # as python/README.md's recipe, before any loader
    if source == "prefix":
        t0, c0 = time.perf_counter(), cpu()
        # One thread, the prefix alone: a loader of whole prepared volumes, as validation reads them.
        for item in volshard.ValidationLoader(items, pipeline=config, split=None, num_replicas=1, rank=0):
            pass
        out = {"wall": time.perf_counter() - t0, "cpu": cpu() - c0}
    else:
        if steps:  # the config file with the augmentations added, as a user would write it
            volshard_steps = {
                "affine": {"affine_prob": 1.0, "affine_rotate": 0.26, "affine_scale": 0.1,
                           "affine_padding": "zeros"},
                "elastic": {"elastic_prob": 1.0, "elastic_sigma": [5.0, 8.0], "elastic_magnitude": [100.0, 200.0],
                            "affine_rotate": 0.26, "affine_scale": 0.1, "affine_padding": "zeros"},
                "noise": {"noise_prob": 1.0, "noise_std": 0.1},
                "smooth": {"smooth_prob": 1.0},
                "scale_shift": {"rand_scale": 0.1, "rand_scale_prob": 1.0, "rand_shift": 0.1,
                                "rand_shift_prob": 1.0},
                "contrast": {"contrast_prob": 1.0},
                "bias": {"bias_prob": 1.0},
            }
            with open(config) as f:
                settings = json.load(f)
            for step in steps:
                settings.update(volshard_steps[step])
            config = os.path.join(os.path.dirname(datalist), "spleen_augmented_%d.json" % os.getpid())
            with open(config, "w") as f:
                json.dump(settings, f)
        out = volshard_epochs(items, config, source == "cached", epochs)
out["peak_mb"] = peak_mb()
print(json.dumps(out))
"""


def restack(folder, edge):
    """Every case of `folder` as edge^3 voxels over the same extent: nearest along each axis (voxel k takes
    k * n // edge), the spacing scaled to match; written as plain int16 (labels uint8), the same files for
    both sides."""
    import nibabel as nib
    import numpy as np
    for sub in ("imagesTr", "labelsTr", "imagesTs"):
        folder_sub = os.path.join(folder, sub)
        if not os.path.isdir(folder_sub):
            continue
        for name in sorted(os.listdir(folder_sub)):
            path = os.path.join(folder_sub, name)
            img = nib.load(path)
            out = np.asanyarray(img.dataobj)
            affine = img.affine.copy()
            for axis in range(3):
                n = out.shape[axis]
                out = np.take(out, (np.arange(edge) * n) // edge, axis=axis)
                affine[:3, axis] *= n / edge
            out = np.rint(out).astype(np.uint8 if sub == "labelsTr" else np.int16)
            nib.save(nib.Nifti1Image(out, affine), path)


# --augment's step sets (the CHILD's names), each step prob 1 on both sides.
INTENSITY = ("noise", "smooth", "scale_shift", "contrast")
AUGMENT = {"affine": ("affine",) + INTENSITY, "elastic": ("elastic",) + INTENSITY}
STEP_NAMES = {"": "the crop alone", "affine": "RandAffine", "elastic": "Rand3DElastic",
              "noise": "RandGaussianNoise", "smooth": "RandGaussianSmooth",
              "scale_shift": "RandScaleIntensity + RandShiftIntensity", "contrast": "RandAdjustContrast",
              "bias": "RandBiasField"}


def run_child(side, source, datalist, epochs, steps, env=None):
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD, side, source, datalist, CONFIG, str(epochs),
                        ",".join(steps)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{side} {source} {','.join(steps)} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def profile_steps(args, datalist, n):
    """Each augmentation alone after the cached crops, both sides alternated in fresh processes: CPU (process
    and workers) a crop, less the crop alone's."""
    crops = n * args.epochs * 4
    cpu = {}
    for r in range(args.rounds):
        for step in STEP_NAMES:
            for side in (("monai", "volshard") if r % 2 == 0 else ("volshard", "monai")):
                out = run_child(side, "cached", datalist, args.epochs, [step] if step else [])
                cpu.setdefault((side, step), []).append(out["cpu"] / crops * 1000)
    print(f"each augmentation alone, prob 1, after the spleen pipeline's cached 96^3 crops ({n} synthetic "
          f"{args.size} x {args.size} x {args.size // 4} CT volumes, {crops} crops a run, 2 workers); CPU ms a crop "
          f"above the crop alone, median of {args.rounds} alternated rounds")
    print(f"{'step':40} | {'MONAI ms':>9} {'volshard ms':>11} | {'ratio':>6}")
    print("-" * 73)
    base = {side: statistics.median(cpu[(side, "")]) for side in ("monai", "volshard")}
    for step, name in STEP_NAMES.items():
        m, v = (statistics.median(cpu[(side, step)]) - (base[side] if step else 0.0) for side in ("monai", "volshard"))
        print(f"{name:40} | {m:9.1f} {v:11.1f} | {m / v if v > 0 else float('nan'):5.1f}x")
    print("(the crop alone: the whole run's CPU a crop, cache set-up excluded; each step: its run's CPU a crop less "
          "the crop alone's; ratio: MONAI's over volshard's)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--volumes", type=int, default=8)
    ap.add_argument("--size", type=int, default=384, help="in-plane edge (size / 4 slices)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    what = ap.add_mutually_exclusive_group()  # --steps runs the steps its own way
    what.add_argument("--augment", nargs="?", const="affine", choices=sorted(AUGMENT),
                      help="RandAffine (or Rand3DElastic: --augment elastic) and the intensity augmentations "
                           "after the crop, prob 1, on both sides")
    what.add_argument("--steps", action="store_true",
                      help="instead of the table: each augmentation alone on the cached crops, CPU ms a crop on "
                           "each side above the crop alone")
    ap.add_argument("--cube", type=int, default=0,
                    help="resample every case to cube^3 voxels over the same extent (e.g. --size 512 --cube 256)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="volshard_spleen_monai_")
    data = os.path.join(root, "Task09")
    subprocess.run([args.bin, "synth", "--kind", "ct", "--out", data, "--count", str(args.volumes), "--size",
                    str(args.size), "--seed", "0"], check=True, capture_output=True)
    if args.cube:
        restack(data, args.cube)
    datalist = os.path.join(data, "dataset.json")
    with open(datalist) as f:
        n = len(json.load(f)["training"])
    if args.steps:
        return profile_steps(args, datalist, n)
    results = {}
    sides = ("monai", "monai_tuned", "volshard")
    sources = ("files", "cached") if args.augment else ("prefix", "files", "cached")
    # MONAI as its users run it, and with glibc tuned as tune_allocator_for_volumes tunes it
    # (mmap threshold 256 MiB, trim threshold 1 GiB, one arena) in every worker process.
    tuned = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.mmap_threshold=268435456:"
                 "glibc.malloc.trim_threshold=1073741824:glibc.malloc.arena_max=1")
    for r in range(args.rounds):
        for source in sources:
            for side in (sides if r % 2 == 0 else tuple(reversed(sides))):
                results.setdefault((side, source), []).append(
                    run_child(side, source, datalist, args.epochs, AUGMENT.get(args.augment, ()),
                              env=tuned if side == "monai_tuned" else None))
    shape = f"{args.cube}^3 (from {args.size} x {args.size} x {args.size // 4})" if args.cube else \
        f"{args.size} x {args.size} x {args.size // 4}"
    what = (" + " + ("Rand3DElastic" if args.augment == "elastic" else "RandAffine") +
            ", RandGaussianNoise, RandGaussianSmooth, RandScaleIntensity, RandShiftIntensity, "
            "RandAdjustContrast, each prob 1") if args.augment else ""
    print(f"spleen pipeline (configs/spleen.json; MONAI 1.4's notebook transforms){what} on {n} synthetic "
          f"{shape} int16 CT volumes; batch 2, 96^3 x 4 crops, 2 workers "
          f"(MONAI: processes, volshard: threads), {args.epochs} epochs, median of {args.rounds} alternated rounds")
    print(f"{'source':8} {'side':12} | {'wall s/vol':>10} {'CPU s/vol':>10} {'peak MB':>8} | "
          f"{'wall ratio':>10} {'CPU ratio':>9} {'CPU ratio, tuned':>16}")
    print("-" * 97)
    for source in sources:
        volumes = n if source == "prefix" else n * args.epochs
        row = {}
        for side in sides:
            rs = results[(side, source)]
            row[side] = (statistics.median(x["wall"] for x in rs) / volumes,
                         statistics.median(x["cpu"] for x in rs) / volumes,
                         statistics.median(x["peak_mb"] for x in rs))
        for side in sides:
            wall, cpu, peak = row[side]
            ratio = ""
            if side == "volshard":
                ratio = (f"{row['monai'][0] / wall:9.1f}x {row['monai'][1] / cpu:8.1f}x "
                         f"{row['monai_tuned'][1] / cpu:15.1f}x")
            print(f"{source:8} {side:12} | {wall:10.3f} {cpu:10.3f} {peak:8.0f} | {ratio}")
    print("(prefix: one thread, the deterministic steps alone, per case; files: every epoch from the files; "
          "cached: the prefix cached, then the crops; peak MB: VmHWM of the process plus its largest worker "
          "process; ratios: MONAI's over volshard's; tuned: MONAI with glibc tuned as volshard tunes it)")


if __name__ == "__main__":
    main()
