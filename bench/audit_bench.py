#!/usr/bin/env python3
"""What `python -m volshard.audit` costs: the wall time of auditing a clean DDP
script whose loader reads an index space of --samples small samples (a
TensorDataset row of 16 float32 values each), batch 32, with torch's
DistributedSampler and set_epoch, --world ranks, --epochs epochs, --workers
DataLoader workers per rank and --reruns runs, as a user runs it (the launcher
in its own process, so its start is counted). The audit must find nothing; the
run fails otherwise.

Issue #41's target is the default: 8 ranks x 2 epochs of 10,000 samples, 2
runs, on a 2-core machine in under a minute. --sweep times the grid
world {2, 4, 8} x samples {1,000, 10,000, 100,000} x workers {0, 2} instead, one
line each, to show how the time grows.

  PYTHONPATH=build/python $(scripts/pyenv.sh --path)/bin/python bench/audit_bench.py [--sweep]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SCRIPT = '''
import argparse
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--samples", type=int, required=True)
p.add_argument("--workers", type=int, required=True)
args = p.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
dataset = TensorDataset(torch.arange(args.samples * 16, dtype=torch.float32).reshape(args.samples, 16))
sampler = DistributedSampler(dataset, shuffle=True, seed=0)
loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=args.workers)
for epoch in range(100):
    sampler.set_epoch(epoch)
    for (x,) in loader:
        x.sum()
'''


def audit_once(folder, world, samples, epochs, workers, reruns):
    script = os.path.join(folder, "train.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    out = os.path.join(folder, "audit.json")
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "volshard.audit", "--nproc-per-node", str(world), "--epochs",
                        str(epochs), "--reruns", str(reruns), "--quiet", "--json", out, script, "--samples",
                        str(samples), "--workers", str(workers)], capture_output=True, text=True)
    wall = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"audit_bench: the audit exited {p.returncode} (a clean script must give no finding):\n"
                 f"{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    with open(out) as f:
        doc = json.load(f)
    read = sum(r["samples"] for e in doc["loaders"][0]["epochs"] for r in e["ranks"])
    return wall, doc["seconds"], read


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--reruns", type=int, default=2)
    ap.add_argument("--sweep", action="store_true", help="time the grid world x samples x workers")
    args = ap.parse_args()
    grid = [(w, n, k) for k in (0, 2) for n in (1000, 10000, 100000) for w in (2, 4, 8)] if args.sweep \
        else [(args.world, args.samples, args.workers)]
    print(f"{os.cpu_count()} cores; {args.epochs} epochs, {args.reruns} runs; batch 32; "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{'ranks':>5} {'samples':>8} {'workers':>7} {'wall s':>8} {'per run s':>16} {'reads/run':>10}")
    for world, samples, workers in grid:
        with tempfile.TemporaryDirectory(prefix="audit_bench_") as folder:
            wall, runs, read = audit_once(folder, world, samples, args.epochs, workers, args.reruns)
        print(f"{world:>5} {samples:>8} {workers:>7} {wall:>8.1f} {' '.join(f'{s:.1f}' for s in runs):>16} "
              f"{read:>10}", flush=True)


if __name__ == "__main__":
    main()
