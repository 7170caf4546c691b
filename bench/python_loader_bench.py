#!/usr/bin/env python3
"""volshard.Loader in a Python loop against torch.utils.data.DataLoader (2 worker
processes) over pipeline_baseline.py's numpy + nibabel Dataset (the same steps:
load, scale, RandCropByPosNegLabel 96^3 x 4, RandRotate90, collate), in the
same run; and the Python overhead per batch: the loop's time outside the C++
loader's next() (which reports how long it blocked).

usage: PYTHONPATH=build/python $(scripts/pyenv.sh --path)/bin/python bench/python_loader_bench.py [--bin build/bin/volshard]
VOLSHARD_BENCH_QUICK=1: 8 volumes instead of 24.
"""
import argparse
import importlib.util
import os
import subprocess
import tempfile
import time

import torch

import volshard

HERE = os.path.dirname(os.path.abspath(__file__))


def baseline_module():
    spec = importlib.util.spec_from_file_location("pipeline_baseline", os.path.join(HERE, "pipeline_baseline.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def run_volshard(pairs, cached, epochs):
    sampler = volshard.DistributedSampler(len(pairs), num_replicas=1, rank=0, seed=0)
    loader = volshard.Loader(pairs, sampler, crop=96, num_samples=4, batch_size=2, workers=2,
                             cache_rate=1.0 if cached else 0.0)
    volumes, batches, waited = 0, 0, 0.0
    t0 = time.perf_counter()
    for e in range(epochs):
        loader.set_epoch(e)
        for b in loader:
            volumes += b["image"].shape[0] // 4
            batches += 1
            waited += b["wait_seconds"]
    seconds = time.perf_counter() - t0
    loader.close()
    return volumes / seconds, (seconds - waited) / batches, waited / batches


def run_cpp_alone(pairs, cached, epochs):
    """The same Loader with every batch taken and dropped inside C++ (no Python per batch)."""
    sampler = volshard.DistributedSampler(len(pairs), num_replicas=1, rank=0, seed=0)
    loader = volshard.Loader(pairs, sampler, crop=96, num_samples=4, batch_size=2, workers=2,
                             cache_rate=1.0 if cached else 0.0)
    volumes = 0
    t0 = time.perf_counter()
    for e in range(epochs):
        loader.set_epoch(e)
        indices = list(sampler)
        loader._core.start_epoch(indices, e)
        loader._core.drain()
        volumes += len(indices)
    seconds = time.perf_counter() - t0
    loader.close()
    return volumes / seconds


def run_torch(base, pairs, cached, epochs):
    ds = base.Tutorial([(p["image"], p["label"]) for p in pairs], cached)
    dl = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True, num_workers=2, collate_fn=base.collate)
    volumes = 0
    t0 = time.perf_counter()
    for e in range(epochs):
        ds.epoch = e
        for image, _ in dl:
            volumes += image.shape[0] // 4
    return volumes / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/volshard")
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    count = 8 if os.environ.get("VOLSHARD_BENCH_QUICK") else 24
    torch.set_num_threads(1)
    tuned = volshard.tune_allocator_for_volumes()  # as bench_pipeline; the baseline's workers inherit it
    base = baseline_module()
    with tempfile.TemporaryDirectory(prefix="volshard_pybench_") as data:
        subprocess.run([args.bin, "synth", "--out", data, "--count", str(count), "--size", "128", "--seed", "0"],
                       check=True, stdout=subprocess.DEVNULL)
        pairs = volshard.pairs_from_folder(data)
        print(f"python_loader_bench: {count} synthetic 128^3 .nii.gz volumes x {args.epochs} epochs, batch 2, "
              f"96^3 x 4 crops, one rank; volshard.Loader(workers=2 threads) vs torch DataLoader(num_workers=2); "
              f"tuned malloc: {'yes' if tuned else 'no'}")
        print("Python ms/batch: the loop's time outside the C++ next() call (dict, generator, Python); "
              "C++ next() ms/batch: how long next() blocked")
        print("C++ alone vol/s: the same Loader with the batches drained inside C++ (no Python per batch); "
              "Python/C++: the Python loop's vol/s over it (every figure: the best of 2 runs)")
        print("mode   | volshard.Loader vol/s | torch DataLoader vol/s | ratio | Python ms/batch | "
              "C++ next() ms/batch | C++ alone vol/s | Python/C++")
        for mode in ("files", "cached"):
            cached = mode == "cached"
            # Python loop and C++ alone twice each, interleaved, the faster of each: single runs move
            # with the host's load. (Loader() faults in its batch buffers before the timing starts,
            # DataLoader::reserve; before that, a process's first loader paid them in its first epoch.)
            runs = [(run_volshard(pairs, cached, args.epochs), run_cpp_alone(pairs, cached, args.epochs))
                    for _ in range(2)]
            ours, overhead, waited = max((r[0] for r in runs), key=lambda r: r[0])
            alone = max(r[1] for r in runs)
            theirs = max(run_torch(base, pairs, cached, args.epochs) for _ in range(2))
            print(f"{mode:6} | {ours:21.1f} | {theirs:22.1f} | {ours / theirs:5.2f} | {overhead * 1e3:15.3f} | "
                  f"{waited * 1e3:19.1f} | {alone:15.1f} | {ours / alone:10.2f}", flush=True)


if __name__ == "__main__":
    main()
