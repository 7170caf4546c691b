"""The GPU issue's figures, measured in one run on one GPU (scripts/gpu/run.sh runs it there).

  python bench/gpu/train_step.py --bin BUILD/bin/volshard --out DIR [--device cuda] [--quick]

Rows (each volshard row beside its baseline, measured in the same run):
  1. The tutorial UNet's training step (96^3 crops, batch 2 x 4 crops, AMP fp16 and bf16):
     `volshard train` against PyTorch in Python with MONAI's UNet, DiceLoss, Adam and torch.amp on
     the same GPU, fed from tensors already on the GPU (no data time at all), on equal terms: both
     deterministic, both not. Then each of the step's levers on its own row (cuDNN's autotuner,
     channels-last, the fused optimizer, fewer reads to the host, a CUDA graph of the step) and
     all together, deterministic and not, each against the baseline of its mode (torch's default
     Python loop; a row also gives that loop with cudnn.benchmark).
  2. Data wait as a share of the step, with 2 and 8 loader threads (goal < 5 %).
  3. The cache on the GPU (--cache-device device) against the host cache: crops/s over an epoch.
  4. Samples/s at 128^3 crops (batch 2 x 2 crops, AMP fp16).
  5. Two ranks on one GPU (NCCL refuses two ranks per device; the row says what ran).
`--device cpu --quick` runs every row small on a CPU (a dry run of this script, not a figure).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

# Deterministic cuBLAS, for the baseline under torch.use_deterministic_algorithms (set before torch
# starts cuBLAS; `volshard train --deterministic` sets the same for itself).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def run(cmd, env=None, check=True):
    full = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        full.pop(k, None)
    full.update(env or {})
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=full)
    if check and p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    return p


def step_lines(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if '"type":"step"' in line.replace(" ", "")]


def epoch_lines(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if '"type":"epoch"' in line.replace(" ", "")]


def steady(lines, skip):
    """The steps after the first `skip` (warm-up: cuDNN's algorithm search, allocator growth)."""
    return lines[skip:] if len(lines) > skip else lines


def volshard_train(args, data, name, *extra, nproc=1, check=True, fingerprints=False):
    out = os.path.join(args.out, name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [args.bin, "train", "--data", data, "--out", out, "--val-every", 0, "--device", args.device,
           "--nproc-per-node", nproc, "--fingerprints" if fingerprints else "--no-fingerprints", "--overwrite",
           *extra]
    t0 = time.perf_counter()
    p = run(cmd, check=check)
    return out, time.perf_counter() - t0, p


def baseline_step_seconds(args, crop, crops, steps, channels, strides, deterministic=False, amp="fp16",
                          benchmark=False):
    """MONAI's UNet + DiceLoss + Adam under torch.amp (`amp`: fp16 with a GradScaler, or bf16), on
    tensors already on the device: the median step. `deterministic`: under
    torch.use_deterministic_algorithms(True), as `volshard train` runs by default. `benchmark`:
    torch.backends.cudnn.benchmark (off in torch's default loop)."""
    import torch
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.benchmark = benchmark
    try:
        from monai.losses import DiceLoss
        from monai.networks.nets import UNet
    except ImportError as e:  # the wheel did not travel, or does not import beside this torch
        return None, f"MONAI not importable: {e}"
    device = torch.device(args.device)
    torch.manual_seed(0)
    net = UNet(spatial_dims=3, in_channels=1, out_channels=1, channels=channels, strides=strides,
               num_res_units=2).to(device)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    loss_fn = DiceLoss(sigmoid=True)
    fp16 = amp == "fp16"
    scaler = torch.amp.GradScaler(device.type, enabled=fp16)
    image = torch.rand(crops, 1, crop, crop, crop, device=device)
    label = (image > 0.7).float()
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.float16 if fp16 else torch.bfloat16):
            logits = net(image)
        loss = loss_fn(logits.float(), label)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        loss.item()
        times.append(time.perf_counter() - t0)
    return statistics.median(steady(times, 5)), "MONAI UNet, torch.amp, data on the device"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="small sizes (a dry run on a CPU)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    quick = args.quick
    crop, big = (16, 16) if quick else (96, 128)
    size = 24 if quick else 160
    steps = 7 if quick else 25
    channels = (4, 8, 16) if quick else (16, 32, 64, 128, 256)
    strides = (2, 2) if quick else (2, 2, 2, 2)
    net = ["--channels", ",".join(map(str, channels)), "--strides", ",".join(map(str, strides)),
           "--res-units", 2]
    data = os.path.join(args.out, "data")
    if not os.path.isdir(data):
        run([args.bin, "synth", "--out", data, "--count", 16, "--size", size, "--seed", 1])
    rows = []

    def say(row):
        rows.append(row)
        print(row, flush=True)

    print(f"| row | volshard | baseline | ratio |\n| --- | --- | --- | --- |", flush=True)
    # 1. The tutorial step on equal terms, then lever by lever, against MONAI's UNet in Python on
    # device-resident tensors. Each volshard row is one run of `volshard train` (its median step
    # after the first 5: cuDNN's search, the graph's warm-up and capture).
    levers = [
        ("cuDNN autotuned", ["--cudnn-benchmark"]),
        ("channels-last", ["--channels-last"]),
        ("fused adam", ["--fused-optimizer"]),
        ("loss read every 25 steps", ["--log-every", 25]),
        ("CUDA graph (with fused adam)", ["--fused-optimizer", "--cuda-graph"]),
    ]
    everything = ["--channels-last", "--fused-optimizer", "--log-every", 25, "--cuda-graph"]

    def step_rows(mode):
        common = ["--crop", crop, "--batch-size", 2, "--num-samples", 4, *net, "--amp", mode, "--workers", 8,
                  "--max-steps", steps, "--epochs", 100]

        def ours(name, *extra, fingerprints=False):
            out, _, p = volshard_train(args, data, f"{mode}_{name}", *common, *extra, check=False,
                                       fingerprints=fingerprints)
            if p.returncode != 0:
                last = [l for l in (p.stderr or p.stdout).splitlines() if l.strip()][-1:]
                return None, last[0][:200] if last else f"rc {p.returncode}"
            return statistics.median(8 / l["samples_per_s"] for l in steady(step_lines(out), 5)), ""

        def say_row(label, mine, theirs):
            (t, what), (m, why) = theirs, mine
            if m is None:
                say(f"| {label} | failed: {why} | | |")
            elif t is None:
                say(f"| {label} | {m * 1000:.1f} ms | {what} | |")
            else:
                say(f"| {label} | {m * 1000:.1f} ms | {t * 1000:.1f} ms | {t / m:.2f}x |")

        det = baseline_step_seconds(args, crop, 8, steps, channels, strides, deterministic=True, amp=mode)
        free = baseline_step_seconds(args, crop, 8, steps, channels, strides, amp=mode)
        tuned = baseline_step_seconds(args, crop, 8, steps, channels, strides, amp=mode, benchmark=True)
        say(f"| {mode}: baseline, {free[1]} | | deterministic {det[0] * 1000:.1f} ms, free "
            f"{free[0] * 1000:.1f} ms, free with cudnn.benchmark {tuned[0] * 1000:.1f} ms | |"
            if free[0] else f"| {mode}: baseline | | {free[1]} | |")
        say_row(f"{mode} step {crop}^3, 2 x 4 crops, both deterministic (volshard's default)", ours("det"), det)
        if mode == "fp16":  # what `volshard diff`'s per-step hashes of gradients and weights cost
            say_row(f"{mode} both deterministic, with --fingerprints (volshard's default)",
                    ours("det_fingerprints", fingerprints=True), det)
        say_row(f"{mode} step, neither deterministic", ours("free", "--no-deterministic",
                                                             "--no-cudnn-benchmark"), free)
        if mode == "fp16":  # each lever on its own, in the free mode
            for label, extra in levers:
                base = ["--no-deterministic"] + ([] if "--cudnn-benchmark" in extra else ["--no-cudnn-benchmark"])
                say_row(f"{mode} free + {label}", ours(label.split()[0].lower(), *base, *extra), free)
        all_free = ours("free_all", "--no-deterministic", *everything)
        say_row(f"{mode} free + all levers (autotuned, channels-last, fused, log 25, graph)", all_free, free)
        say_row(f"{mode} the same, against the loop with cudnn.benchmark", all_free, tuned)
        say_row(f"{mode} deterministic + channels-last, fused, log 25, graph",
                ours("det_all", *everything), det)

    step_rows("fp16")
    amp = ["--amp", "fp16" if args.device != "cpu" else "bf16"]
    common = ["--crop", crop, "--batch-size", 2, "--num-samples", 4, *net, *amp]
    # 2. Data wait as a share of the step over whole epochs, their starts included (the first epoch,
    # which fills the cache and tunes cuDNN, left out), with 2 and 8 loader threads.
    for workers in (2, 8):
        out, _, _ = volshard_train(args, data, f"wait{workers}", *common, "--workers", workers, "--epochs", 4)
        epochs = epoch_lines(out)[1:]
        waits = [e["data_wait"] * 100 for e in epochs]
        each = ", ".join(f"{w:.2f}" for w in waits)
        say(f"| data wait over epochs 2-4, {workers} loader threads | {sum(waits) / len(waits):.2f} % of the step "
            f"({each}) | goal < 1 % | |")
    step_rows("bf16")
    # 3. The cache on the GPU against the host cache: crops/s over an epoch (the second epoch on).
    per_epoch = {}
    for cache in ("host", "device"):
        out, _, _ = volshard_train(args, data, f"cache_{cache}", *common, "--workers", 2, "--epochs", 3,
                                   "--cache-device", cache)
        per_epoch[cache] = statistics.median(e["samples_per_s"] for e in epoch_lines(out)[1:])
    say(f"| crops/s an epoch, cache on {args.device} (--cache-device device) | {per_epoch['device']:.1f} | "
        f"{per_epoch['host']:.1f} (host cache) | {per_epoch['device'] / per_epoch['host']:.2f}x |")
    # 4. Samples/s at 128^3.
    out, _, _ = volshard_train(args, data, "big", "--crop", big, "--batch-size", 2, "--num-samples", 2, *net, *amp,
                               "--workers", 8, "--max-steps", steps, "--epochs", 100)
    rate = statistics.median(l["samples_per_s"] for l in steady(step_lines(out), 3))
    say(f"| samples/s at {big}^3, 2 x 2 crops, {amp[1]} | {rate:.1f} | MLPerf's ~72 per H100 (published) | |")
    # 5. Two ranks on one GPU.
    out, _, p = volshard_train(args, data, "two_ranks", "--crop", crop, "--batch-size", 1, "--num-samples", 2,
                               *net, *amp, "--workers", 2, "--max-steps", 4, "--epochs", 100, nproc=2, check=False)
    if p.returncode == 0:
        say(f"| two ranks on one {args.device} | ran: {len(step_lines(out))} steps | | |")
    else:
        last = [l for l in (p.stderr or p.stdout).splitlines() if l.strip()][-1:]
        say(f"| two ranks on one {args.device} | refused: {last[0][:160] if last else p.returncode} | | |")
    with open(os.path.join(args.out, "train_step.md"), "w") as f:
        f.write("\n".join(rows) + "\n")
    failed = [r for r in rows if "| failed:" in r]
    if failed:
        sys.exit(f"{len(failed)} row(s) failed: the first is {failed[0]}")


if __name__ == "__main__":
    main()
