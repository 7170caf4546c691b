#!/usr/bin/env python3
"""Differential test: sampler-inspect against PyTorch's DistributedSampler.

Runs random configurations (n, W, seed, epoch, mode, shuffle) through both and
requires identical per-rank indices, or that both refuse the configuration.
Exits 77 (skipped) when torch cannot be imported (ctest runs the pinned environment's).
"""
import argparse
import json
import os
import random
import subprocess
import sys

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_oracle import all_shards  # noqa: E402


def random_config(rng):
    w = rng.choice([1, 2, 3, 4, 8]) if rng.random() < 0.5 else rng.randint(1, 64)
    r = rng.random()
    if r < 0.1:
        n = 0
    elif r < 0.3:
        n = rng.randint(1, w)  # n <= W: padding wraps, uneven refuses n < W
    elif r < 0.9:
        n = rng.randint(1, 300)
    else:
        n = rng.randint(300, 20000)
    s = rng.random()
    if s < 0.3:
        seed = rng.randint(0, 2**32 - 1)
    elif s < 0.5:
        seed = 2**32 + rng.randint(-3, 3)  # at and around 2^32
    elif s < 0.6:
        seed = rng.randint(0, 10)
    else:
        seed = rng.randint(2**32, 2**64 - 200)
    return {"size": n, "world_size": w, "seed": seed, "epoch": rng.randint(0, 120),
            "mode": rng.choice(["pad", "drop_last", "uneven"]), "shuffle": rng.random() < 0.8}


def run_binary(binary, c):
    cmd = [binary, "--size", str(c["size"]), "--world-size", str(c["world_size"]),
           "--seed", str(c["seed"]), "--epoch", str(c["epoch"]), "--mode", c["mode"], "--format", "json"]
    if not c["shuffle"]:
        cmd.append("--no-shuffle")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return ("error", p.returncode, p.stderr.strip())
    doc = json.loads(p.stdout)
    return [r["indices"] for r in doc["epochs"][0]["ranks"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--configs", type=int, default=600)
    ap.add_argument("--seed", type=int, default=20261122)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    counts = {"equal": 0, "both_refused": 0}
    failures = []
    seen = {"n0": 0, "n_lt_w": 0, "seed_ge_2^32": 0}
    for k in range(args.configs):
        c = random_config(rng)
        seen["n0"] += c["size"] == 0
        seen["n_lt_w"] += c["size"] < c["world_size"]
        seen["seed_ge_2^32"] += c["seed"] >= 2**32
        try:
            expected = all_shards(c["size"], c["world_size"], c["seed"], c["epoch"], c["mode"], c["shuffle"])
        except ValueError:
            expected = None
        got = run_binary(args.binary, c)
        if expected is None:
            if isinstance(got, tuple) and got[1] == 2:
                counts["both_refused"] += 1
            else:
                failures.append((c, "torch/MONAI refuses, binary gave %r" % (got,)))
        elif got == expected:
            counts["equal"] += 1
        else:
            failures.append((c, "differs: binary %s vs torch %s" % (str(got)[:200], str(expected)[:200])))
    print("configs: %d  equal: %d  both refused: %d  failed: %d  (n=0: %d, n<W: %d, seed>=2^32: %d)" % (
        args.configs, counts["equal"], counts["both_refused"], len(failures),
        seen["n0"], seen["n_lt_w"], seen["seed_ge_2^32"]))
    for c, why in failures[:10]:
        print("FAIL", json.dumps(c), why)
    if min(seen.values()) == 0:
        print("FAIL: a required kind of configuration was not generated", seen)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
