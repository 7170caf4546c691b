#!/usr/bin/env python3
"""Validation balanced by work: each rank's validation time with MONAI's split
(`--val-balance count`: rank r takes volumes r, r + W, ...) against volshard's
default (`--val-balance cost`: the costliest volume first to the least loaded
rank), on CT-like volumes whose sizes differ as real CT does.

The set: `volshard synth --kind ct` at in-plane sizes drawn once (seed 0) from
64..224 (16 to 56 slices), 12 validation cases in that drawn order plus 2 training
cases at 128; a small UNet (4-8-16-32) and 32^3 sliding windows, so the
figures are about the split, not the network. Both runs train one step on 2
ranks and validate once; each rank's own validation seconds come from
metrics.jsonl ("val_seconds", measured before the ranks wait for each other).
The metric is the same in both runs (checked).

  validation_balance.py --bin build/bin/volshard --out build/bench_val
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    rng = random.Random(0)
    sizes = [rng.choice([64, 96, 128, 160, 192, 224]) for _ in range(12)]
    train, val = [], []
    for k, size in enumerate([128] + sizes):
        folder = os.path.join(args.out, "case%02d" % k)
        count = 2 if k == 0 else 1
        subprocess.run([args.bin, "synth", "--kind", "ct", "--out", folder, "--count", str(count), "--size",
                        str(size), "--seed", str(k)], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(folder, "dataset.json")) as f:
            cases = [{key: os.path.join(folder, c[key]) for key in ("image", "label")}
                     for c in json.load(f)["training"]]
        (train if k == 0 else val).extend(cases)
    datalist = os.path.join(args.out, "datalist.json")
    with open(datalist, "w") as f:
        json.dump({"training": train, "validation": val}, f)
    rows = {}
    for balance in ("count", "cost"):
        run = os.path.join(args.out, "run_" + balance)
        p = subprocess.run([args.bin, "train", "--datalist", datalist, "--out", run, "--nproc-per-node",
                            str(args.ranks), "--epochs", "1", "--val-every", "1", "--val-balance", balance,
                            "--intensity", "range", "--a-min", "-57", "--a-max", "164", "--clip",
                            "--crop", "32", "--roi", "32", "--num-samples", "1", "--batch-size", "1",
                            "--channels", "4,8,16,32", "--strides", "2,2,2", "--workers", "1",
                            "--sw-batch-size", "4"], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(p.stdout + p.stderr)
        with open(os.path.join(run, "metrics.jsonl")) as f:
            epoch = [j for j in map(json.loads, f) if j["type"] == "epoch"][-1]
        rows[balance] = (epoch["val_seconds"], epoch["val_dice"])
    print("Validation on %d ranks, 12 CT-like volumes of %s voxels in-plane (drawn once, seed 0), 32^3 windows"
          % (args.ranks, ", ".join(map(str, sizes))))
    print()
    print("| split | " + " | ".join("rank %d s" % r for r in range(args.ranks)) +
          " | wall s (slowest rank) | idle rank-seconds | idle share | Dice |")
    print("| --- " * (args.ranks + 5) + "|")
    for balance, (seconds, dice) in rows.items():
        wall = max(seconds)
        idle = sum(wall - s for s in seconds)
        name = "count (MONAI's r, r + W, ...)" if balance == "count" else "cost (longest first, default)"
        print("| %s | %s | %.2f | %.2f | %.0f %% | %.6f |" % (
            name, " | ".join("%.2f" % s for s in seconds), wall, idle, 100 * idle / (wall * len(seconds)), dice))
    (count_s, count_dice), (cost_s, cost_dice) = rows["count"], rows["cost"]
    print()
    print("wall time ratio count / cost: %.2fx; the same Dice: %s" % (
        max(count_s) / max(cost_s), "yes" if count_dice == cost_dice else "NO (%r vs %r)" % (count_dice, cost_dice)))
    return 0 if count_dice == cost_dice else 1


if __name__ == "__main__":
    sys.exit(main())
