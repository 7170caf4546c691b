#!/usr/bin/env python3
"""What `--invariant` costs: the same global batch G trained ordinarily (each
rank a batch of G / W, gradients all-reduced in float buckets) and with
`--invariant` (each volume's gradient on its own, summed as 64-bit integers),
on the same ranks, threads and data; the step time is the mean over epochs 2-4
(metrics.jsonl), so start-up and caching are left out.
Then the two invariant runs at 1 and 2 ranks are compared byte for byte.

  invariant_overhead.py --bin build/bin/volshard --out build/bench_invariant
"""
import argparse
import json
import os
import shutil
import subprocess
import sys


def train(binary, data, out, ranks, net, *extra):
    crop, channels = net
    p = subprocess.run([binary, "train", "--data", data, "--out", out, "--nproc-per-node", str(ranks), "--epochs", "4",
                        "--val-every", "0", "--crop", str(crop), "--num-samples", "2", "--channels", channels,
                        "--strides", "2,2,2", "--threads", "1", "--workers", "1", *map(str, extra)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stdout + p.stderr)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(l) for l in f]
    epochs = [l for l in lines if l["type"] == "epoch"]
    steps = [l for l in lines if l["type"] == "step"]
    per_epoch = len(steps) // len(epochs)
    # Epochs 2-4's wall time over their steps: warm caches, no start-up.
    return sum(e["seconds"] for e in epochs[1:]) / (per_epoch * (len(epochs) - 1)), epochs[-1]["loss"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    data = os.path.join(args.out, "data")
    subprocess.run([args.bin, "synth", "--out", data, "--count", "16", "--size", "64", "--seed", "0"], check=True,
                   stdout=subprocess.DEVNULL)
    g = 4
    print("--invariant on 2 ranks, 1 thread each: global batch %d volumes x 2 crops, 16 volumes of 64^3, "
          "4 epochs of 4 steps, s/step over epochs 2-4" % g)
    print()
    print("| network, crop | ordinary DDP (2 x batch %d) s/step | --invariant (%d volumes one by one) s/step | "
          "overhead | model.pt at 1 and 2 ranks |" % (g // 2, g))
    print("| --- | --- | --- | --- | --- |")
    all_same = True
    for net in ((32, "8,16,32,64"), (64, "16,32,64,128")):
        tag = "%d_%s" % (net[0], net[1].replace(",", "-"))
        ordinary, _ = train(args.bin, data, os.path.join(args.out, "ordinary" + tag), 2, net, "--batch-size", g // 2)
        invariant, _ = train(args.bin, data, os.path.join(args.out, "invariant2" + tag), 2, net, "--batch-size", g,
                             "--invariant")
        train(args.bin, data, os.path.join(args.out, "invariant1" + tag), 1, net, "--batch-size", g, "--invariant")
        same = open(os.path.join(args.out, "invariant2" + tag, "model.pt"), "rb").read() == \
            open(os.path.join(args.out, "invariant1" + tag, "model.pt"), "rb").read()
        all_same = all_same and same
        print("| UNet %s, %d^3 | %.3f | %.3f | %+.0f %% | %s |" % (
            net[1].replace(",", "-"), net[0], ordinary, invariant, 100 * (invariant / ordinary - 1),
            "byte-identical" if same else "DIFFERENT"))
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
