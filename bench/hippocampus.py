#!/usr/bin/env python3
"""The Decathlon's Hippocampus task (Task04, real T1 MRI) trained end to end
with `volshard train --config configs/hippocampus.json` on 2 ranks of this
machine's CPU, against nnU-Net's published Dice (`make bench-hippocampus`).

    bench/hippocampus.py --bin build/bin/volshard [--data ../shared/data/msd_hippocampus]
                         [--out build/bench_hippocampus] [--nproc 2] [--seeds N] [--test-fifth]
                         [-- extra train flags]

The split: the trainer's Decathlon rule, the last fifth of dataset.json's
`training` list validates (52 of 260 cases) and the first four fifths train;
the script writes the held-out names to OUT/split.json. Prints the Dice per
class at every validation, the best epoch, wall time, the peak RSS of the
largest process (a rank), and crops per second; then predicts one held-out
case with the best weights and draws it (OUT/prediction.png). With --seeds N (N > 1) it trains
seeds 0..N-1 into OUT/seed<k> and ends with the mean, standard deviation and 95 % interval of the
final and best Dice per class over the seeds (bench/seed_interval.py).

With --test-fifth (issue 44 item 4), the fifth of the cases before the validation fifth is a test
set held out from all tuning (cases 157-208 of dataset.json's list, hippocampus_244 ..
hippocampus_321 for Task04): the run trains on the first three fifths, validates (and keeps its
best epoch) on the last fifth as before, and its best weights are then scored once on the test
fifth with and without each inference option (bench/inference_options.py, OUT/test_scores.json).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import seed_interval
from scoring import decathlon_split, test_fifth_split

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NNUNET = {"Anterior": 0.90, "Posterior": 0.89}  # nnU-Net's Decathlon Task04 test-set Dice (3d_fullres)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the volshard binary")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "msd_hippocampus"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench_hippocampus"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "hippocampus.json"))
    ap.add_argument("--nproc", type=int, default=2, help="ranks (--nproc-per-node)")
    ap.add_argument("--seeds", type=int, default=1,
                    help="trainings with --seed 0..N-1 (OUT/seed<k>), then the seed interval of their Dice")
    ap.add_argument("--test-fifth", action="store_true",
                    help="hold the fifth before the validation fifth out of training and tuning, "
                         "and score the best weights on it")
    ap.add_argument("--module", help="the built Python module's folder (default: BIN's ../python)")
    ap.add_argument("train_flags", nargs="*", help="after --: more `volshard train` flags")
    a = ap.parse_args()
    if a.seeds < 1:
        ap.error(f"--seeds {a.seeds}: at least 1")
    flags = [str(f) for f in a.train_flags]
    if a.seeds > 1 and "--seed" in flags:
        ap.error("--seeds N sets each run's --seed: leave --seed out of the train flags")
    datalist = os.path.join(a.data, "dataset.json")
    if not os.path.exists(datalist):
        print(f"hippocampus bench: skipped: {datalist} is absent (the Decathlon's Task04; "
              "CI has it in ../shared/data beside the clone)")
        return 2
    os.makedirs(a.out, exist_ok=True)
    val_fraction = json.load(open(a.config)).get("val_fraction", 0.2)
    test = []
    if a.test_fifth:
        training, held_out, test, names = test_fifth_split(a.data, val_fraction)
        datalist = os.path.join(a.out, "datalist.json")
        for path, scored in ((datalist, held_out), (os.path.join(a.out, "test_datalist.json"), test)):
            with open(path, "w") as f:
                json.dump({"training": training, "validation": scored}, f, indent=1)
    else:
        training, held_out, names = decathlon_split(a.data, val_fraction)
    device = flags[flags.index("--device") + 1] if "--device" in flags[:-1] else "CPU"
    with open(os.path.join(a.out, "split.json"), "w") as f:
        json.dump({"rule": f"the last round({val_fraction} n) of dataset.json's training list validate" +
                           (", as many before them are the test set" if test else ""),
                   "training": len(training),
                   "validation": [os.path.basename(c["image"]) for c in held_out],
                   "test": [os.path.basename(c["image"]) for c in test]}, f, indent=1)
    results = []
    for seed in range(a.seeds):
        out = a.out if a.seeds == 1 else os.path.join(a.out, f"seed{seed}")
        extra = [] if a.seeds == 1 else ["--seed", str(seed)]
        if a.seeds > 1:
            print(f"\n## seed {seed}", flush=True)
        result = one_run(a, out, extra, datalist, device, len(training), held_out, names)
        if result is None or (test and not score_test(a, out, len(test), result)):
            return 1
        results.append(result)
    if a.seeds > 1:
        print(f"\nSeed interval over {a.seeds} seeds (mean, sample sd, Student's t 95 % interval of the mean):")
        for label, key in (("final", "final"), ("best", "best")):
            print(f"- {label} mean foreground Dice: " + seed_interval.text(r[key]["val_dice"] for r in results))
            for c, n in enumerate(names):
                print(f"  - {n}: " + seed_interval.text(r[key]["val_dice_per_class"][c] for r in results))
        if test:
            for row in ("plain", "all three"):
                print(f"- test fifth, {row}: " + seed_interval.text(r["test"][row]["mean"] for r in results))
        print("- wall: " + seed_interval.text((r["wall"] for r in results), digits=0) + " (seconds)")
    return 0


def one_run(a, out, extra, datalist, device, n_training, held_out, names):
    """One `volshard train` of the config into OUT/run on DEVICE (the label printed), its table
    printed; returns the final and best validation records and the wall time (None where the run
    failed)."""
    os.makedirs(out, exist_ok=True)
    run = os.path.join(out, "run")
    cmd = [a.bin, "train", "--config", a.config, "--datalist", datalist, "--out", run, "--overwrite",
           "--nproc-per-node", str(a.nproc), *extra, *a.train_flags]
    print("$ " + " ".join(map(str, cmd)), flush=True)
    t0 = time.monotonic()
    with open(os.path.join(out, "train.log"), "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB -> MiB
    if code != 0:
        print(open(os.path.join(out, "train.log")).read()[-3000:])
        print(f"hippocampus bench: volshard train exited with {code}")
        return None
    records = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    epochs = [r for r in records if r.get("type") == "epoch"]
    validated = [r for r in epochs if r.get("val_dice") is not None]
    crops_per_s = sum(r["samples_per_s"] for r in epochs) / max(len(epochs), 1)  # over the training steps
    print(f"\nHippocampus (MSD Task04): {n_training} training cases, {len(held_out)} held out, "
          f"{a.nproc} ranks on {device}, {os.path.basename(a.config)}")
    print("| epoch | " + " | ".join(names) + " | mean |")
    print("|---|" + "---|" * (len(names) + 1))
    for r in validated:
        print(f"| {r['epoch'] + 1} | " + " | ".join(f"{d:.4f}" for d in r["val_dice_per_class"]) +
              f" | {r['val_dice']:.4f} |")
    best = max(validated, key=lambda r: r["val_dice"]) if validated else None
    if best:
        print(f"| nnU-Net (published) | " + " | ".join(f"{NNUNET.get(n, float('nan')):.2f}" for n in names) +
              f" | {sum(NNUNET.values()) / len(NNUNET):.3f} |")
        print(f"\nbest: epoch {best['epoch'] + 1}, mean foreground Dice {best['val_dice']:.4f} "
              f"({', '.join(f'{n} {d:.4f}' for n, d in zip(names, best['val_dice_per_class']))})")
    print(f"wall {wall:.0f} s ({wall / 60:.1f} min, validation and the cache fill included), "
          f"{crops_per_s:.0f} crops/s in the training steps, peak RSS {peak_rss:.0f} MiB (largest process)")
    # One held-out case predicted with the best weights (model.pt without them) and drawn.
    case = held_out[0]
    image, label = case["image"], case["label"]
    weights = os.path.join(run, "best_model.pt")
    if not os.path.exists(weights):
        weights = os.path.join(run, "model.pt")
    pred = os.path.join(out, "prediction.nii.gz")
    png = os.path.join(out, "prediction.png")
    for step in ([a.bin, "predict", "--model", weights, "--config", os.path.join(run, "config.json"),
                  "--image", image, "--out", pred],
                 [a.bin, "preview", "--image", image, "--label", label, "--prediction", pred, "--out", png]):
        p = subprocess.run(step, capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stdout + p.stderr)
            return None
    print(f"held-out {os.path.basename(image)}: {p.stdout.strip()}")
    if not validated:
        print("hippocampus bench: the run validated no epoch (--val-every)")
        return None
    return {"final": validated[-1], "best": best, "wall": wall}


def score_test(a, out, n_test, result):
    """The run's best weights scored once on the test fifth, with and without each inference
    option; the scores go into RESULT["test"]. False where the scoring failed."""
    scores = os.path.join(out, "test_scores.json")
    module = a.module or os.path.join(os.path.dirname(os.path.abspath(a.bin)), "..", "python")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (module, os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, os.path.join(HERE, "inference_options.py"), "--run", os.path.join(out, "run"),
           "--datalist", os.path.join(a.out, "test_datalist.json"), "--json", scores]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(p.stdout + p.stderr)
        print("hippocampus bench: scoring the test fifth failed")
        return False
    print(f"\nThe test fifth ({n_test} cases held out from training and from choosing the epoch), "
          "the best validation epoch's weights:")
    print(p.stdout.strip())
    with open(scores) as f:
        result["test"] = json.load(f)
    return True


if __name__ == "__main__":
    sys.exit(main())
