#!/usr/bin/env python3
"""End-to-end tests of `volshard train` and `volshard predict`: the real binary,
several ranks over Gloo on 127.0.0.1, outputs read back with torch and nibabel.

  train_e2e.py --binary build/bin/volshard [--fixtures tests/trainer/fixtures] [-k pattern]

TrainJobTest covers the training job (issue: DDP trainer); ReproTest and
FaultTest the reproducibility harness and fault tolerance.
"""
import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import nibabel as nib
    import numpy as np
    import torch
except ImportError:
    print("SKIP: torch/nibabel/numpy are not importable")
    sys.exit(77)

BINARY = None
FIXTURES = None

# These suites check the CPU's semantics (bit-identity, resume, faults), also on a machine with a GPU:
# the binaries they start see none. GpuTest gives its runs the GPUs back.
HAS_CUDA = torch.cuda.is_available()
GPU_COUNT = torch.cuda.device_count()  # read before they are hidden (torch reads the variable once)
GPUS_SHOWN = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
os.environ["CUDA_VISIBLE_DEVICES"] = ""

# A small UNet (3 levels) on 64^3 volumes with 32^3 crops: a few seconds a run.
SMALL = ["--crop", "32", "--num-samples", "2", "--channels", "4,8,16,32", "--strides", "2,2,2",
         "--workers", "1", "--threads", "1", "--batch-size", "1"]


def run(*args, env=None, timeout=600):
    full_env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
        full_env.pop(k, None)
    for k, v in (env or {}).items():  # None removes a variable
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    return subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def metrics(run_dir, keys=("type", "epoch", "step", "loss", "lr", "val_dice")):
    """metrics.jsonl without the timing fields (which differ run to run)."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [tuple(json.loads(line).get(k) for k in keys) for line in f]


def model_bytes(run_dir):
    with open(os.path.join(run_dir, "model.pt"), "rb") as f:
        return f.read()


def trace(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def wait_for_step(run_dir, step, proc, timeout=300):
    """Waits until metrics.jsonl has a step line >= step."""
    path = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError("training ended before step %d: %s" % (step, proc.stderr.read()))
        if os.path.exists(path):
            with open(path) as f:
                steps = [json.loads(l)["step"] for l in f if l.endswith("\n") and '"type":"step"' in l]
            if steps and max(steps) >= step:
                return
        time.sleep(0.05)
    raise AssertionError("no step %d within %d s" % (step, timeout))


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def swap_zip_names(raw, a, b):
    """The zip `raw` with the names of records a and b (of one length) swapped where a zip keeps
    them, the local headers and the central directory; the records' bytes and CRCs stay put."""
    import io
    import struct
    import zipfile
    assert len(a) == len(b)
    buf = bytearray(raw)
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        offsets = {i.filename: i.header_offset for i in z.infolist()}
        pos = z.start_dir
    for name, other in ((a, b), (b, a)):
        at = offsets[name] + 30
        assert buf[at:at + len(name)] == name.encode()
        buf[at:at + len(name)] = other.encode()
    while buf[pos:pos + 4] == b"PK\x01\x02":
        n, m, k = struct.unpack("<HHH", bytes(buf[pos + 28:pos + 34]))
        name = bytes(buf[pos + 46:pos + 46 + n]).decode()
        if name in (a, b):
            buf[pos + 46:pos + 46 + n] = (b if name == a else a).encode()
        pos += 46 + n + m + k
    return bytes(buf)


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="volshard_train_e2e_")
        cls.data = os.path.join(cls.root, "data")
        p = run("synth", "--out", cls.data, "--count", 8, "--size", 64, "--seed", 3)
        assert p.returncode == 0, p.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def out(self, name):
        return os.path.join(self.root, self.id().split(".")[-1] + "_" + name)

    def train(self, out, *extra, nproc=2, check=True, epochs=2, env=None):
        # 8 pairs: 6 train, 2 validate (one per rank at W = 2).
        p = run("train", "--data", self.data, "--out", out, "--epochs", epochs, "--val-fraction", "0.25",
                "--nproc-per-node", nproc, *SMALL, *extra, env=env)
        if check:
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return p

    def popen_train(self, out, *extra, nproc=2, epochs=3):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        return subprocess.Popen([BINARY, "train", "--data", self.data, "--out", out, "--epochs", str(epochs),
                                 "--val-fraction", "0.25", "--nproc-per-node", str(nproc), *SMALL,
                                 *map(str, extra)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)


class TrainJobTest(Base):
    def test_two_ranks_write_a_run_folder_python_and_monai_can_read(self):
        out = self.out("run")
        p = self.train(out)
        self.assertIn("2 rank(s) over gloo", p.stderr)
        self.assertIn("BLAS:", p.stderr)
        for name in ("model.pt", "checkpoint.pt", "metrics.jsonl", "config.json", "curves.png"):
            self.assertTrue(os.path.getsize(os.path.join(out, name)) > 0, name)
        state = torch.load(os.path.join(out, "model.pt"))
        self.assertIsInstance(state, dict)
        self.assertEqual(next(iter(state)), "model.0.conv.unit0.conv.weight")
        self.assertEqual(tuple(state["model.0.conv.unit0.conv.weight"].shape), (4, 1, 3, 3, 3))
        self.assertEqual(tuple(state["model.1.submodule.1.submodule.1.submodule.residual.weight"].shape),
                         (32, 16, 1, 1, 1))
        with open(os.path.join(out, "metrics.jsonl")) as f:
            lines = [json.loads(l) for l in f]
        steps = [l for l in lines if l["type"] == "step"]
        epochs = [l for l in lines if l["type"] == "epoch"]
        # 6 training volumes over 2 ranks, batch 1: 3 steps an epoch.
        self.assertEqual([l["step"] for l in steps], [1, 2, 3, 4, 5, 6])
        self.assertEqual(len(epochs), 2)
        for l in steps:
            for k in ("loss", "lr", "samples_per_s", "data_wait"):
                self.assertIn(k, l)
            self.assertTrue(0 < l["loss"] < 1)
        self.assertTrue(all(0 <= e["val_dice"] <= 1 for e in epochs))
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["channels"], [4, 8, 16, 32])
        self.assertEqual(config["crop"], [32])  # one edge: a cube
        with open(os.path.join(out, "curves.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        ck = torch.load(os.path.join(out, "checkpoint.pt"))
        self.assertEqual(ck["format"], "volshard-checkpoint")
        meta = json.loads(ck["meta"])
        self.assertEqual(meta["sampler"]["epoch"], 2)
        self.assertEqual(meta["global_step"], 6)

    def test_bf16_ends_within_a_hundredth_of_float32s_validation_dice(self):
        dice = {}
        for amp in ("off", "bf16"):
            out = self.out(amp)
            p = self.train(out, "--amp", amp)
            dice[amp] = [d for kind, d in metrics(out, ("type", "val_dice")) if kind == "epoch"][-1]
        # What bf16 costs on the CPU is said at start (#43 item 9).
        self.assertIn("autocast bf16 (on the CPU under --deterministic, convolutions without oneDNN", p.stderr)
        self.assertLess(abs(dice["bf16"] - dice["off"]), 0.01, dice)
        self.assertNotEqual(dice["bf16"], dice["off"])  # autocast acted

    def test_cache_on_the_device_trains_bit_identical_to_the_host_cache_and_cuda_is_refused_here(self):
        host, device = self.out("host"), self.out("device")
        p = self.train(host, "--device", "cpu", epochs=1)
        self.assertIn("cache and augmentation in host memory", p.stderr)
        p = self.train(device, "--device", "cpu", "--cache-device", "device", epochs=1)
        self.assertIn("cache and augmentation on cpu (tensor ops)", p.stderr)
        self.assertEqual(model_bytes(device), model_bytes(host))
        self.assertEqual(metrics(device), metrics(host))
        p = self.train(self.out("cuda"), "--device", "cpu", "--cache-device", "cuda", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--cache-device=cuda: the network trains on cpu (--device)", p.stderr)

    def test_tutorial_network_has_monais_state_dict_keys_and_shapes(self):
        out = self.out("tutorial")
        p = run("train", "--data", self.data, "--out", out, "--epochs", 1, "--val-every", 0, "--crop", 32,
                "--num-samples", 1, "--batch-size", 1, "--workers", 1, "--max-steps", 1, "--val-fraction", "0.25")
        self.assertEqual(p.returncode, 0, p.stderr)
        state = torch.load(os.path.join(out, "model.pt"))
        expected = []
        with open(os.path.join(FIXTURES, "monai_unet_state_dict.txt")) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                key, shape = line.split("\t")[:2]
                expected.append((key, shape))
        got = [(k, "(" + ", ".join(map(str, v.shape)) + ("," if v.dim() == 1 else "") + ")")
               for k, v in state.items()]
        self.assertEqual(got, expected)

    def test_init_weights_from_a_python_state_dict_and_predict_whole_and_sliding(self):
        out = self.out("run")
        self.train(out, epochs=1)
        # What a MONAI user saves: torch.save(model.state_dict()) -- an OrderedDict with _metadata.
        sd = torch.load(os.path.join(out, "model.pt"))
        od = collections.OrderedDict(sd)
        od._metadata = collections.OrderedDict({"": {"version": 1}})
        init = os.path.join(self.root, "init_od.pt")
        torch.save(od, init)
        out2 = self.out("from_init")
        p = self.train(out2, "--init-weights", init, "--max-steps", 1, nproc=1, epochs=1)
        self.assertEqual(p.returncode, 0, p.stderr)

        img = os.path.join(self.data, "img7.nii.gz")
        # The run's config gives validation's window (roi 0: its crop, 32), and predict says so.
        said = {"config": "sliding window 32^3, overlap 0.25, 1 window a pass",
                "roi32": "sliding window 32^3", "whole": "whole volume", "sliding": "sliding window 32^3"}
        for extra, name in (([], "config"), (["--roi", 32], "roi32"), (["--whole-volume"], "whole"),
                            (["--roi", 32, "--output", "prob"], "sliding")):
            pred = os.path.join(self.root, name + ".nii.gz")
            p = run("predict", "--model", os.path.join(out, "model.pt"), "--config", os.path.join(out, "config.json"),
                    "--image", img, "--out", pred, *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(said[name], p.stdout)
            a, src = nib.load(pred), nib.load(img)
            self.assertEqual(a.shape, (64, 64, 64))
            self.assertTrue(np.allclose(a.affine, src.affine))
            x = np.asanyarray(a.dataobj)
            if name != "sliding":
                self.assertEqual(x.dtype, np.uint8)
                self.assertTrue(set(np.unique(x)) <= {0, 1})
            else:
                self.assertTrue(0 <= x.min() and x.max() <= 1)
        read = lambda name: np.asanyarray(nib.load(os.path.join(self.root, name + ".nii.gz")).dataobj)
        self.assertTrue(np.array_equal(read("config"), read("roi32")))
        # The inference options: Gaussian blending, nnU-Net's mirroring, the largest component, said and
        # applied (labels stay 0/1; the largest component is one piece); largest component needs labels.
        pred = os.path.join(self.root, "tta.nii.gz")
        p = run("predict", "--model", os.path.join(out, "model.pt"), "--config", os.path.join(out, "config.json"),
                "--image", img, "--out", pred, "--roi", 32, "--overlap", 0.5, "--blend", "gaussian",
                "--tta-flips", "0,1,2", "--largest-component")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("sliding window 32^3, overlap 0.5, 1 window a pass, gaussian blend (sigma 0.125 of the "
                      "window), mirrored over 0,1,2 (8 passes a window), largest component per class", p.stdout)
        self.assertTrue(set(np.unique(read("tta"))) <= {0, 1})
        p = run("predict", "--model", os.path.join(out, "model.pt"), "--config", os.path.join(out, "config.json"),
                "--image", img, "--out", pred, "--output", "prob", "--largest-component")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--largest-component keeps components of labels: it needs --output=label", p.stderr)
        p = run("predict", "--model", os.path.join(out, "model.pt"), "--config", os.path.join(out, "config.json"),
                "--image", img, "--out", pred, "--tta-flips", "0,3")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--tta-flips=0,3: test-time mirroring: axis 3 must be 0 (X), 1 (Y) or 2 (Z)", p.stderr)
        p = run("predict", "--model", os.path.join(out, "model.pt"), "--image", img, "--out", pred)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("has shape [4, 1, 3, 3, 3], the model's is [16, 1, 3, 3, 3]", p.stderr)  # tutorial channels by default

    def test_sgd_with_a_cosine_schedule_logs_the_scheduled_learning_rate(self):
        out = self.out("run")
        self.train(out, "--optimizer", "sgd", "--lr", "0.01", "--lr-schedule", "cosine", "--val-every", 0)
        import math
        lrs = [m[4] for m in metrics(out) if m[0] == "step"]
        self.assertEqual(len(lrs), 8)  # --val-every 0 holds nothing out: 8 pairs, 4 steps an epoch
        for k, lr in enumerate(lrs):
            self.assertAlmostEqual(lr, 0.01 * 0.5 * (1 + math.cos(math.pi * k / 8)), places=12)

    def test_two_launchers_as_two_nodes_form_one_world(self):
        out = self.out("run")
        port = reserved_port(self)
        procs = [subprocess.Popen(
            [BINARY, "train", "--data", self.data, "--out", out, "--epochs", "1", "--val-fraction", "0.25", *SMALL,
             "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", str(node), "--master-addr", "127.0.0.1",
             "--master-port", port], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for node in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        self.assertEqual([p.returncode for p in procs], [0, 0], outs)
        self.assertIn("2 rank(s)", outs[0][1])
        self.assertEqual(len([m for m in metrics(out) if m[0] == "step"]), 3)

    def test_torchrun_environment_contract_set_by_hand(self):
        out = self.out("run")
        port = reserved_port(self)
        procs = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            procs.append(subprocess.Popen(
                [BINARY, "train", "--data", self.data, "--out", out, "--epochs", "1", "--val-fraction", "0.25",
                 *SMALL], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=300) for p in procs]
        self.assertEqual([p.returncode for p in procs], [0, 0], outs)
        self.assertIn("2 rank(s)", outs[0][1])
        self.assertEqual(len([m for m in metrics(out) if m[0] == "step"]), 3)

    def test_resume_continues_and_file_init_method_works(self):
        out = self.out("run")
        self.train(out, epochs=1)
        p = self.train(out, "--resume", out, epochs=2)
        self.assertIn("done after 6 steps", p.stdout)
        rdzv = os.path.join(self.root, "rdzv_%d" % os.getpid())
        procs = [subprocess.Popen([BINARY, "train", "--data", self.data, "--out", self.out("file"), "--epochs", "1",
                                   "--val-fraction", "0.25", *SMALL, "--init-method", "file://" + rdzv,
                                   "--rank", str(r), "--world-size", "2"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        self.assertEqual([p.returncode for p in procs], [0, 0], outs)

    def test_configurations_that_cannot_work_are_rejected_before_any_worker_starts(self):
        holder = socket.socket()
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        self.addCleanup(holder.close)
        busy = holder.getsockname()[1]
        bad_data = os.path.join(self.root, "bad_data")
        mismatched = os.path.join(self.root, "mismatched_data")
        if not os.path.exists(bad_data):
            shutil.copytree(self.data, bad_data)
            with open(os.path.join(bad_data, "seg3.nii.gz"), "wb") as f:
                f.write(b"not a nifti")
            shutil.copytree(self.data, mismatched)
            nib.save(nib.Nifti1Image(np.zeros((64, 64, 48), np.int32), np.eye(4)),
                     os.path.join(mismatched, "seg2.nii.gz"))
        cases = [
            (["--crop", "96"], "--crop=96 is larger than"),
            (["--crop", "96"], "is larger than 6 of 6 training volume(s) as stored: "),
            (["--crop", "96"], "img5.nii.gz (64x64x64); every volume holds a crop of 64x64x64"),
            (["--crop", "96"], "use --crop=64,64,64 or less, --spatial-pad=96 or --allow-smaller"),
            (["--crop", "32,80,32"], "--crop=32,80,32 is larger than 6 of 6"),
            (["--crop", "32,80,32"], "use --crop=32,64,32 or less, --spatial-pad=32,80,32 or"),
            (["--crop", "32,32"], "--crop=32,32 must be one edge (a cube) or three, x,y,z"),
            (["--crop", "36"], "multiple of 8"),
            (["--batch-size", "0"], "--batch-size=0"),
            (["--lr", "-1"], "--lr="),
            (["--epochs", "0"], "--epochs=0"),
            (["--master-port", str(busy)], "is busy"),
            (["--data", bad_data], "seg3.nii.gz"),
            (["--data", mismatched], "seg2.nii.gz is 64x64x48"),
            (["--amp", "fp16", "--invariant"], "--invariant sums float32 gradients exactly: --amp=fp16"),
            (["--model", "segresnet", "--init-filters", "12"], "init_filters=12 is not a multiple of num_groups=8"),
        ]
        cases.append((["--device", "cuda"], "--device=cuda: no CUDA device here"))  # the GPUs are hidden
        for extra, message in cases:
            out = self.out("bad")
            args = ["--data", self.data, "--out", out, "--epochs", "1", "--val-fraction", "0.25",
                    "--nproc-per-node", "2", *SMALL]
            for flag in extra[::2]:  # the case's flag replaces the default one
                if flag in args:
                    i = args.index(flag)
                    del args[i:i + 2]
            p = run("train", *args, *extra)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(message, p.stderr, extra)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)  # one message, from the launcher alone
            self.assertFalse(os.path.exists(out), extra)


class FrontDoorTest(Base):
    """What a new user meets: runs in existing folders, checkpoints as inputs, what is validated."""

    def test_a_run_folder_is_not_overwritten_and_its_checkpoint_feeds_predict_and_sampler_inspect(self):
        out = self.out("run")
        self.train(out, epochs=1)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            before = f.read()
        p = self.train(out, epochs=1, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("already holds a run", p.stderr)
        self.assertIn("--out=%s already holds a run" % out, p.stderr)
        self.assertIn("continue it with --resume=%s or start afresh with --overwrite" % out, p.stderr)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            self.assertEqual(f.read(), before)
        # predict takes the checkpoint's model: the same prediction as from model.pt
        image = os.path.join(self.data, "img7.nii.gz")
        preds = []
        for model in ("model.pt", "checkpoint.pt"):
            pred = self.out(model + ".nii.gz")
            p = run("predict", "--model", os.path.join(out, model), "--config", os.path.join(out, "config.json"),
                    "--image", image, "--out", pred, "--roi-size", 32)
            self.assertEqual(p.returncode, 0, p.stderr)
            preds.append(np.asanyarray(nib.load(pred).dataobj))
        self.assertTrue(np.array_equal(preds[0], preds[1]))
        for bad in ("pred.txt", "pred.nii.txt", "pred"):
            p = run("predict", "--model", os.path.join(out, "model.pt"), "--config", os.path.join(out, "config.json"),
                    "--image", image, "--out", self.out(bad))
            self.assertNotEqual(p.returncode, 0, bad)
            self.assertIn("must end in .nii or .nii.gz", p.stderr, bad)
            self.assertFalse(os.path.exists(self.out(bad)), bad)
        # sampler-inspect reads the sampler state from the checkpoint
        inspect = os.path.join(os.path.dirname(BINARY), "sampler-inspect")
        p = subprocess.run([inspect, "--state", os.path.join(out, "checkpoint.pt"), "--format", "json"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        state = torch.load(os.path.join(out, "checkpoint.pt"))
        sampler = json.loads(state["meta"])["sampler"]
        self.assertEqual(json.loads(p.stdout)["epochs"][0]["epoch"], sampler["epoch"])
        p = subprocess.run([inspect, "--state", os.path.join(out, "model.pt")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("model.pt", p.stderr)
        # --overwrite replaces the run
        p = self.train(out, "--overwrite", epochs=1)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_what_is_validated_on_is_said_at_start_and_fewer_volumes_than_ranks_validate(self):
        p = self.train(self.out("none"), "--val-every", 0, "--max-steps", 1, epochs=1)
        self.assertIn("8 training volume(s); validation: none (--val-every 0)", p.stderr)
        # 1 of 8 pairs held out, 2 ranks: rank 0 validates it, rank 1 waits.
        out = self.out("one")
        p = run("train", "--data", self.data, "--out", out, "--epochs", 1, "--val-fraction", 0.125,
                "--nproc-per-node", 2, *SMALL)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("validation: 1 volume(s), the last 1 pair(s) of " + self.data, p.stderr)
        self.assertIn("on 1 of 2 ranks", p.stderr)
        self.assertIsNotNone([m for m in metrics(out) if m[0] == "epoch"][0][5])
        datalist = os.path.join(self.root, "training_only.json")
        with open(datalist, "w") as f:
            json.dump({"training": [{"image": os.path.join(self.data, "img%d.nii.gz" % i),
                                     "label": os.path.join(self.data, "seg%d.nii.gz" % i)} for i in range(4)]}, f)
        p = run("train", "--datalist", datalist, "--out", self.out("datalist"), "--epochs", 1, "--max-steps", 1,
                "--nproc-per-node", 1, *SMALL)
        self.assertEqual(p.returncode, 0, p.stderr)
        # Stopped after its first step: no curves.png yet, and the stop message names none.
        self.assertIn("stopped after 1 steps: ", p.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.out("datalist"), "curves.png")))
        self.assertNotIn("curves.png", p.stdout)
        # A Decathlon dataset.json has no "validation" list: its tail is held out, as --data's.
        self.assertIn("3 training volume(s); validation: 1 volume(s), the last 1 pair(s) of " + datalist,
                      p.stderr)
        # Its config.json (which holds "data": "") resumes it, and a changed option is named.
        resumed = self.out("datalist")
        p = run("train", "--config", os.path.join(resumed, "config.json"), "--resume", resumed, "--lr", 0.002,
                "--nproc-per-node", 1)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("done after 3 steps", p.stdout)  # --max-steps is not saved: the resumed run goes on
        self.assertIn("with changed options: --lr 0.001 there, 0.002 here", p.stderr)

    def test_repro_on_a_small_dataset_counts_pad_mode_repeats_as_padding(self):
        small = os.path.join(self.root, "small")
        p = run("synth", "--out", small, "--count", 3, "--size", 32, "--seed", 1)
        self.assertEqual(p.returncode, 0, p.stderr)
        # The elastic runs hold nothing out (--val-every 0): 3 training volumes, batch 2 on 2 ranks,
        # so one step is the epoch, and the pad mode wraps one volume.
        p = run("repro", "--data", small, "--val-fraction", "0.34", *SMALL[:-2], "--batch-size", 2, "--steps", 4)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(len([l for l in p.stdout.splitlines() if "| pass" in l]), 4, p.stdout)
        self.assertIn("1 repeated (1 of them padding to a multiple of 2 ranks)", p.stdout)
        self.assertIn("3 training volumes: 3 seen, 0 missing", p.stdout)
        self.assertIn("repro: run a, 2 ranks: 4 steps, the reference", p.stderr)
        self.assertIn("repro: check 4/4: elastic resume", p.stderr)


def reserved_port(test):
    """A free port (a str) held until the test ends: bound with SO_REUSEADDR and not listening, so that
    no other process (ctest runs tests side by side) is given it meanwhile, while the ranks' rendezvous
    store and the launcher's check, binding with SO_REUSEADDR, still take it."""
    s = socket.socket()
    test.addCleanup(s.close)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 0))
    return str(s.getsockname()[1])


class ReproTest(Base):
    def test_diff_names_the_step_the_part_and_the_cause_of_each_way_runs_part(self):
        def diff(a, b):
            p = run("diff", a, b)
            self.assertIn(p.returncode, (0, 1), p.stdout + p.stderr)
            return p.returncode, p.stdout

        ref = self.out("ref")
        self.train(ref, "--max-steps", 4, "--val-every", 0, "--trace-samples", self.out("ref.trace"))
        again = self.out("again")
        self.train(again, "--max-steps", 4, "--val-every", 0)
        code, text = diff(ref, again)
        self.assertEqual(code, 0, text)
        self.assertIn("likely cause: none: the runs are the same", text)
        # A changed option: the first step reads other samples.
        seed = self.out("seed")
        self.train(seed, "--max-steps", 4, "--val-every", 0, "--seed", 1, "--trace-samples", self.out("seed.trace"))
        code, text = diff(ref, seed)
        self.assertEqual(code, 1, text)
        self.assertIn("first difference: step 1 (epoch 1), data order", text)
        self.assertRegex(text, r'traces at step 1: A read \{.*"index":.*\}, B read \{')  # both kept traces
        self.assertIn("likely cause: a changed option: --seed 0 there, 1 here", text)
        # Another world size, the same options: each step takes other samples.
        one = self.out("one_rank")
        self.train(one, "--max-steps", 4, "--val-every", 0, nproc=1)
        code, text = diff(ref, one)
        self.assertEqual(code, 1, text)
        self.assertIn("world size: 2 (A), 1 (B)", text)
        self.assertIn("likely cause: a different world size (2 and 1) without --invariant", text)
        # A nondeterministic kernel (injected: one ulp in one gradient at step 3).
        noisy = self.out("noisy")
        p = run("train", "--data", self.data, "--out", noisy, "--epochs", 2, "--val-fraction", "0.25",
                "--nproc-per-node", 2, *SMALL, "--max-steps", 4, "--val-every", 0,
                env={"VOLSHARD_INJECT_GRADIENT_NOISE": "3"})
        self.assertEqual(p.returncode, 0, p.stderr)
        code, text = diff(ref, noisy)
        self.assertEqual(code, 1, text)
        self.assertRegex(text, r"first difference: step 3 \(epoch [12]\), gradients \(bucket [0-9]+ of [0-9]+: ")
        first_parameter = next(iter(torch.load(os.path.join(ref, "model.pt"))))  # the one made noisy
        self.assertIn(first_parameter + " (", text)  # the last name of its bucket (buckets run backwards)
        self.assertIn("after equal data order, augmentation, batch bytes, loss", text)
        self.assertIn("likely cause: a nondeterministic kernel", text)
        # Changed data files: the same samples and crops, other bytes.
        data = self.out("data")
        shutil.copytree(self.data, data)
        image = nib.load(os.path.join(data, "img0.nii.gz"))
        nib.save(nib.Nifti1Image(np.asanyarray(image.dataobj) * 0.5 + 0.25, image.affine),
                 os.path.join(data, "img0.nii.gz"))
        changed = self.out("changed")
        p = run("train", "--data", data, "--out", changed, "--epochs", 2, "--val-fraction", "0.25",
                "--nproc-per-node", 2, *SMALL, "--max-steps", 4, "--val-every", 0)
        self.assertEqual(p.returncode, 0, p.stderr)
        code, text = diff(ref, changed)
        self.assertEqual(code, 1, text)
        self.assertIn("batch bytes, after equal data order, augmentation", text)
        # --invariant at 1 and 2 ranks: nothing parts.
        runs = []
        for world in (1, 2):
            out = self.out("invariant%d" % world)
            p = run("train", "--data", self.data, "--out", out, "--epochs", 1, "--val-fraction", "0.25",
                    "--nproc-per-node", world, *SMALL[:-4], "--invariant", "--batch-size", 3, "--val-every", 0)
            self.assertEqual(p.returncode, 0, p.stderr)
            runs.append(out)
        code, text = diff(*runs)
        self.assertEqual(code, 0, text)
        self.assertIn("both --invariant", text)

    def test_invariant_training_writes_the_same_model_on_1_2_and_3_ranks(self):
        models = []
        for world in (1, 2, 3):
            out = self.out("w%d" % world)
            # SMALL without its --threads 1 and --batch-size 1: 4 is the global batch here.
            p = run("train", "--data", self.data, "--out", out, "--epochs", 2, "--val-fraction", "0.25",
                    "--nproc-per-node", world, *SMALL[:-4], "--invariant", "--batch-size", 4)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("1 intra-op thread(s) per rank", p.stderr)  # --invariant fixes the count
            models.append(model_bytes(out))
        self.assertEqual(models[0], models[1])
        self.assertEqual(models[0], models[2])
        p = run("train", "--data", self.data, "--out", self.out("bn"), "--invariant", "--norm", "batch")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--invariant: --norm=batch mixes the volumes", p.stderr)

    def test_train_log_holds_what_rank_0_printed_on_both_streams(self):
        out = self.out("run")
        p = self.train(out, "--max-steps", 2)
        with open(os.path.join(out, "train.log")) as f:
            log = f.read()
        for line in ("2 rank(s) over gloo", "training volume(s)", "step 2/", "stopped after 2 steps",
                     "resume with: --resume " + out):
            self.assertIn(line, log)
        for line in p.stdout.splitlines() + p.stderr.splitlines():
            if line.startswith(("epoch ", "stopped", "volshard train:")):
                self.assertIn(line.split("] ")[-1], log, line)
        p = self.train(out, "--resume", out)
        with open(os.path.join(out, "train.log")) as f:
            resumed = f.read()
        self.assertTrue(resumed.startswith(log), "a resumed run appends")
        self.assertIn("resuming epoch", resumed[len(log):])
        self.assertIn("epoch 2/2: loss", resumed[len(log):])
        self.train(out, "--overwrite", "--max-steps", 1)
        with open(os.path.join(out, "train.log")) as f:
            self.assertNotIn("resuming epoch", f.read(), "a fresh run starts the log anew")

    def test_same_seed_twice_gives_bit_identical_model_and_metrics(self):
        a, b = self.out("a"), self.out("b")
        self.train(a)
        self.train(b)
        self.assertEqual(model_bytes(a), model_bytes(b))
        self.assertEqual(metrics(a), metrics(b))
        c = self.out("other_seed")
        self.train(c, "--seed", 1)
        self.assertNotEqual(metrics(a), metrics(c))

    def test_sigkill_at_a_random_step_then_resume_is_bit_identical(self):
        ref = self.out("ref")
        self.train(ref, "--checkpoint-every", 1, epochs=3)
        step = random.Random().randint(2, 7)  # of 9
        print("killing at step", step)
        out = self.out("killed")
        proc = self.popen_train(out, "--checkpoint-every", 1)
        wait_for_step(out, step, proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        p = self.train(out, "--checkpoint-every", 1, "--resume", out, epochs=3)
        self.assertEqual(model_bytes(ref), model_bytes(out), "killed at step %d" % step)
        self.assertEqual(metrics(ref), metrics(out))

    def test_augmented_samples_are_the_same_multiset_for_world_sizes_1_2_4(self):
        # Every random step on, each drawn from the sample's own stream; RandAffine, then Rand3DElastic
        # in its place.
        for geometric, flags in (("RandAffine", ("--affine-prob", 0.5)),
                                 ("Rand3DElastic", ("--elastic-prob", 0.5, "--elastic-sigma", "1,2",
                                                    "--elastic-magnitude", "2,6"))):
            seen = {}
            for world in (1, 2, 4):
                path = os.path.join(self.root, "trace_%s_w%d.jsonl" % (geometric, world))
                if os.path.exists(path):
                    os.remove(path)
                self.train(self.out("%s_w%d" % (geometric, world)), "--trace-samples", path, "--val-every", 0,
                           "--flip-prob", 0.5, "--rand-scale", 0.1, "--noise-prob", 0.5, "--smooth-prob", 0.5,
                           "--contrast-prob", 0.5, "--bias-prob", 0.5, *flags, "--affine-rotate", 0.3, "--affine-scale", 0.1,
                           "--zoom-prob", 0.5, nproc=world, epochs=1)
                rows = trace(path)
                self.assertEqual({r["rank"] for r in rows}, set(range(world)))
                seen[world] = rows
            key = lambda r: (r["epoch"], r["index"], r["patch"], tuple(r["crop_start"]), r["rot90_k"],
                             tuple(r["flipped"]), json.dumps(r["intensity"]), json.dumps(r["spatial"]))
            names = {s["step"] for r in seen[1] for s in r["intensity"] + r["spatial"]}
            # Rand3DElastic's affine is recorded as RandAffine's draws beside its own.
            self.assertEqual(names, {"RandScaleIntensity", "RandGaussianNoise", "RandGaussianSmooth",
                                     "RandAdjustContrast", "RandBiasField", "RandZoom", "RandAffine"} | {geometric},
                             geometric)
            # --val-every 0 holds nothing out: 8 volumes x 2 crops, split evenly at W = 1, 2 and 4.
            self.assertEqual(len(seen[1]), 16)
            self.assertEqual(len(set(map(key, seen[1]))), 16)
            self.assertEqual(sorted(map(key, seen[1])), sorted(map(key, seen[2])), geometric)
            self.assertEqual(sorted(map(key, seen[1])), sorted(map(key, seen[4])), geometric)

    def test_a_resumed_trace_holds_each_step_once_and_a_fresh_run_starts_it_anew(self):
        common = ("--val-every", 0, "--checkpoint-every", 1)
        rows = lambda path: sorted(json.dumps(r, sort_keys=True) for r in trace(path))
        ref, ref_trace = self.out("ref"), self.out("ref.trace")
        self.train(ref, "--trace-samples", ref_trace, *common)
        out, out_trace = self.out("cut"), self.out("cut.trace")
        self.train(out, "--trace-samples", out_trace, "--max-steps", 2, *common)
        # What a run killed after its checkpoint of step 2 leaves: step 3 traced, and a torn line.
        later = [dict(r, step=3) for r in trace(out_trace) if r["step"] == 2]
        with open(out_trace, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in later) + '{"epoch": 0, "ste')
        self.train(out, "--trace-samples", out_trace, "--resume", out, *common)
        self.assertEqual(rows(ref_trace), rows(out_trace))
        again = self.out("again")
        self.train(again, "--trace-samples", out_trace, *common)  # a fresh run over the old file
        self.assertEqual(rows(ref_trace), rows(out_trace))

    def test_elastic_resume_between_world_sizes_skips_and_repeats_nothing(self):
        for before, after in ((2, 1), (1, 2)):
            out = self.out("elastic_%d_%d" % (before, after))
            path = out + ".trace"
            self.train(out, "--trace-samples", path, "--val-every", 0, "--max-steps", 1, "--checkpoint-every", 1,
                       nproc=before, epochs=1)
            self.train(out, "--trace-samples", path, "--val-every", 0, "--resume", out, nproc=after, epochs=1)
            rows = [r for r in trace(path) if r["patch"] == 0]
            indices = [r["index"] for r in rows]
            # --val-every 0 holds nothing out: all 8 pairs train.
            self.assertEqual(sorted(set(indices)), list(range(8)), (before, after))  # nothing skipped
            # Nothing repeated but the pad mode's wrap of the remaining order to a multiple of W.
            consumed = before  # one step of batch 1 on `before` ranks
            self.assertEqual(len(indices) - 8, (-(8 - consumed)) % after, (before, after, indices))


    def test_repro_command_prints_a_passing_verdict_table(self):
        p = run("repro", "--data", self.data, "--val-fraction", "0.25", *SMALL, "--steps", 4)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        lines = p.stdout.splitlines()
        self.assertTrue(lines[0].startswith("check"), p.stdout)
        self.assertEqual(len([l for l in lines if "| pass" in l]), 4, p.stdout)
        self.assertIn("killed after step", p.stdout)
        # Its temporary runs are gone: no log path printed that would not exist.
        self.assertNotIn("(log: ", p.stderr)
        self.assertNotIn("kept in", p.stderr)
        kept = self.out("kept")
        p = run("repro", "--data", self.data, "--val-fraction", "0.25", *SMALL, "--steps", 2, "--out", kept)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        logs = re.findall(r"\(log: ([^)]+)\)", p.stderr)
        self.assertTrue(logs, p.stderr)
        for log in logs:
            self.assertTrue(os.path.exists(log), log)
        # repro sets these for its runs: no flags for them in its help.
        help_text = run("repro", "--help").stdout
        for flag in ("--resume", "--max-steps", "--trace-samples", "--checkpoint-every", "--overwrite"):
            self.assertNotRegex(help_text, r"\s" + flag + r"\b", flag)
        self.assertIn("--steps", help_text)
        bad = run("repro", "--data", self.data, "--val-fraction", "0.25", *SMALL, "--steps", 1)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--steps=1", bad.stderr)


class LauncherTest(Base):
    """The launchers people use, run for real: torch 2.11's torch.distributed.launch (--local-rank) and
    torchrun (its agent store), the PET_* variables of TorchX and Kubeflow, SLURM's SIGUSR1 + requeue."""

    def clean_env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PET_", "TORCHELASTIC_", "SLURM_")) and k not in
               ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")}
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def launch(self, launcher, out, *extra, env=None):
        port = reserved_port(self)
        if launcher == "torch.distributed.launch":
            # It runs Python scripts only (--no-python needs --use-env, which drops --local-rank): a
            # user's script that hands its arguments to volshard, as `volshard --local-rank=N train ...`.
            script = os.path.join(self.root, "hand_over.py")
            with open(script, "w") as f:
                f.write("import os, sys\nos.execv(%r, [%r] + sys.argv[1:])\n" % (BINARY, BINARY))
            program = [script]
        else:
            program = ["--no-python", BINARY]
        cmd = [sys.executable, "-m", launcher, "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", port, *program, "train", "--data", self.data, "--out", out,
               "--epochs", "1", "--val-fraction", "0.25", *SMALL, *map(str, extra)]
        return subprocess.run(cmd, capture_output=True, text=True, env=self.clean_env(**(env or {})), timeout=600)

    def test_torchrun_names_a_ranks_error_as_the_root_cause(self):
        # TORCHELASTIC_ERROR_FILE: torchrun's summary shows the failing rank's own message.
        p = self.launch("torch.distributed.run", self.out("failing"),
                        env={"VOLSHARD_INJECT_WRITE_FAILURE": "checkpoint.pt:enospc"})
        self.assertNotEqual(p.returncode, 0)
        summary = p.stderr[p.stderr.index("Root Cause"):]
        self.assertIn("rank 0: error: %s: write failed" % os.path.join(self.out("failing"), "checkpoint.pt"),
                      summary)

    def test_torchrun_with_its_agent_store_and_torch_distributed_launch_with_local_rank(self):
        ref = self.out("ref")
        self.train(ref, epochs=1)
        for launcher in ("torch.distributed.run", "torch.distributed.launch"):
            out = self.out(launcher)
            p = self.launch(launcher, out)
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            self.assertIn("2 rank(s) over gloo", p.stderr)
            self.assertEqual(model_bytes(ref), model_bytes(out), launcher)
        # torchrun serves the store itself: volshard's ranks joined it as clients.
        p = self.launch("torch.distributed.run", self.out("agent"), "--overwrite")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        with open(os.path.join(self.out("agent"), "train.log")) as f:
            self.assertIn("2 rank(s)", f.read())

    def test_local_rank_flag_must_agree_with_the_environment(self):
        p = run("--local-rank=1", "train", "--help", env={"LOCAL_RANK": "0"})
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--local-rank=1 but LOCAL_RANK=0", p.stderr)
        p = run("--local_rank=x", "train", "--help")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--local_rank=x must be a non-negative integer", p.stderr)
        p = run("--local-rank", "0", "train", "--help")
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_pet_variables_make_volshard_the_launcher_as_kubeflow_sets_them(self):
        ref = self.out("ref")
        self.train(ref, epochs=1)
        out = self.out("pet")
        # Kubeflow's PyTorchJob: RANK and WORLD_SIZE count pods; PET_* are torchrun's flags.
        env = self.clean_env(PET_NPROC_PER_NODE=2, PET_NNODES=1, RANK=0, WORLD_SIZE=1,
                             MASTER_ADDR="127.0.0.1", MASTER_PORT=reserved_port(self))
        p = subprocess.run([BINARY, "train", "--data", self.data, "--out", out, "--epochs", "1",
                            "--val-fraction", "0.25", *SMALL], capture_output=True, text=True, env=env, timeout=600)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("2 rank(s) over gloo", p.stderr)
        self.assertEqual(model_bytes(ref), model_bytes(out))
        env["PET_NNODES"] = "1:2"
        p = subprocess.run([BINARY, "train", "--data", self.data, "--out", out, "--overwrite"], capture_output=True,
                           text=True, env=env, timeout=600)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("PET_NNODES='1:2'", p.stderr)

    def test_two_hosts_in_network_namespaces_meet_without_gloo_socket_ifname(self):
        # Two "hosts": network namespaces joined by a veth pair, made here and removed after. Their host
        # name resolves to an address neither namespace has; Gloo must listen on the interface that
        # routes to the master.
        suffix = str(os.getpid() % 100000)
        names = ["vsa" + suffix, "vsb" + suffix]
        ip = shutil.which("ip") or "/usr/sbin/ip"

        def sh(*args):
            return subprocess.run([ip, *args], capture_output=True, text=True)

        if os.geteuid() != 0 or not os.path.exists(ip) or sh("netns", "add", names[0]).returncode != 0:
            self.skipTest("needs root and `ip netns` (iproute2) to make two network namespaces")
        try:
            steps = [("netns", "add", names[1]),
                     ("link", "add", "v" + names[0], "type", "veth", "peer", "name", "v" + names[1])]
            for k, name in enumerate(names):
                steps += [("link", "set", "v" + name, "netns", name),
                          ("-n", name, "addr", "add", "10.213.0.%d/24" % (k + 1), "dev", "v" + name),
                          ("-n", name, "link", "set", "v" + name, "up"), ("-n", name, "link", "set", "lo", "up")]
            for step in steps:
                p = sh(*step)
                if p.returncode != 0:
                    self.skipTest("cannot make the veth pair (%s): %s" % (" ".join(step), p.stderr.strip()))
            out = self.out("run")
            env = self.clean_env()
            procs = [subprocess.Popen(
                [ip, "netns", "exec", name, BINARY, "train", "--data", self.data, "--out", out, "--epochs", "1",
                 "--val-fraction", "0.25", *SMALL, "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", str(k),
                 "--master-addr", "10.213.0.1", "--master-port", "29511", "--timeout", "30"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                for k, name in enumerate(names)]
            outs = [p.communicate(timeout=300) for p in procs]
            self.assertEqual([p.returncode for p in procs], [0, 0], outs)
            self.assertIn("2 rank(s)", outs[0][1])
            self.assertEqual(len([m for m in metrics(out) if m[0] == "step"]), 3)
        finally:
            for name in names:
                sh("netns", "del", name)

    def test_sigusr1_checkpoints_and_a_requeued_job_resumes_bit_identical(self):
        ref = self.out("ref")
        self.train(ref, epochs=3)
        out = self.out("slurm")
        proc = self.popen_train(out)
        wait_for_step(out, 2, proc)
        proc.send_signal(signal.SIGUSR1)  # to the launcher, which forwards it
        _, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 128 + signal.SIGUSR1, err)
        self.assertIn("received SIGUSR1 (SLURM's warning before the time limit)", err)
        # What the requeued job resumes from (a flake once left none: this names the stop's own output).
        self.assertTrue(os.path.exists(os.path.join(out, "checkpoint.pt")),
                        "no checkpoint after the SIGUSR1 stop; its output:\n" + err + "\nmetrics:\n" +
                        open(os.path.join(out, "metrics.jsonl")).read())
        # `scontrol requeue` runs the same command again, with SLURM_RESTART_COUNT=1.
        p = subprocess.run([BINARY, "train", "--data", self.data, "--out", out, "--epochs", "3", "--val-fraction",
                            "0.25", "--nproc-per-node", "2", *SMALL], capture_output=True, text=True,
                           env=self.clean_env(SLURM_RESTART_COUNT=1), timeout=600)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("a requeued SLURM job (SLURM_RESTART_COUNT set): resuming " + out, p.stderr)
        self.assertEqual(model_bytes(ref), model_bytes(out))


class FaultTest(Base):
    def test_fp16_skips_a_step_with_an_inf_gradient_and_resumes_with_its_scale(self):
        # VOLSHARD_INJECT_INF_GRADIENT=2: step 2's gradients hold an inf on every rank (an overflowing
        # float16 backward). torch's GradScaler: that step is skipped and the scale halves.
        env = {"VOLSHARD_INJECT_INF_GRADIENT": "2"}
        common = ["--data", self.data, "--epochs", 2, "--val-fraction", "0.25", "--nproc-per-node", 2, *SMALL,
                  "--amp", "fp16", "--val-every", 0]
        whole = self.out("fp16")
        p = run("train", "--out", whole, *common, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)

        def steps(run_dir):
            with open(os.path.join(run_dir, "metrics.jsonl")) as f:
                return [(l["step"], l["loss_scale"], l["skipped"]) for l in map(json.loads, f) if l["type"] == "step"]

        # --val-every 0: all 8 pairs train, 4 steps an epoch.
        self.assertEqual(steps(whole), [(1, 65536.0, False), (2, 65536.0, True)] +
                         [(k, 32768.0, False) for k in range(3, 9)])
        meta = json.loads(torch.load(os.path.join(whole, "checkpoint.pt"))["meta"])
        self.assertEqual(meta["grad_scaler"], {"scale": 32768.0, "growth_tracker": 6})
        # Stopped after the skipped step and resumed: the checkpoint's scale, the same bytes.
        stopped = self.out("fp16_stopped")
        p = run("train", "--out", stopped, *common, "--max-steps", 3, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run("train", "--out", stopped, *common, "--resume", stopped, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(steps(stopped), steps(whole))
        with open(os.path.join(whole, "model.pt"), "rb") as a, open(os.path.join(stopped, "model.pt"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_a_rank_failing_in_validation_ends_every_rank_naming_it(self):
        # A copy of the data whose last validation image is cut short after its header: the headers
        # pass the start-up checks, and the rank that validates it fails while reading its voxels.
        data = self.out("data")
        shutil.copytree(self.data, data)
        bad = os.path.join(data, "img7.nii.gz")
        with open(bad, "rb") as f:
            head = f.read()
        with open(bad, "wb") as f:
            f.write(head[:len(head) // 2])
        p = run("train", "--data", data, "--out", self.out("run"), "--epochs", "1", "--val-fraction", "0.25",
                "--nproc-per-node", 2, "--timeout", 5, *SMALL, timeout=180)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("img7.nii.gz", p.stderr)
        self.assertRegex(p.stderr, r"rank 1: error: .*img7\.nii\.gz")
        self.assertIn("launcher: worker rank 1", p.stderr)

    def test_a_killed_rank_is_named_and_the_last_checkpoint_resumes(self):
        out = self.out("run")
        proc = self.popen_train(out, "--checkpoint-every", 1, "--timeout", 5)
        wait_for_step(out, 2, proc)
        workers = children(proc.pid)
        self.assertEqual(len(workers), 2)
        os.kill(workers[1], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)  # a hang fails here; no assertion on how fast
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("worker rank 1", err)
        self.assertIn("killed by signal 9", err)
        self.assertIn("lost rank 1", err)
        p = self.train(out, "--checkpoint-every", 1, "--resume", out, epochs=3)
        self.assertIn("done after 9 steps", p.stdout)

    def test_a_hung_rank_is_named_after_the_timeout(self):
        out = self.out("run")
        proc = self.popen_train(out, "--timeout", 3)
        wait_for_step(out, 2, proc)
        workers = children(proc.pid)
        os.kill(workers[1], signal.SIGSTOP)
        _, err = proc.communicate(timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("lost rank 1", err)

    def test_sigterm_checkpoints_mid_epoch_and_resume_is_bit_identical(self):
        ref = self.out("ref")
        self.train(ref, epochs=3)
        out = self.out("stopped")
        proc = self.popen_train(out)
        wait_for_step(out, 2, proc)
        proc.send_signal(signal.SIGTERM)
        stdout, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM, err)
        self.assertIn("received SIGTERM: stopping after this step with a checkpoint", err)
        self.assertIn("resume with: --resume " + out, stdout)
        # What the stop message says, alone: the run's config.json gives every other option.
        p = run("train", "--resume", out, "--nproc-per-node", 2)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stderr, r"resuming epoch [123]/3 \(sampler epoch [012], 0-based as sampler-inspect's\) "
                                   r"at step [0-9]+ from " + re.escape(out))
        self.assertEqual(model_bytes(ref), model_bytes(out))
        # The best validation so far survives the stop: the same best weights and record.
        for name in ("best_model.pt", "best_model.json"):
            with open(os.path.join(ref, name), "rb") as a, open(os.path.join(out, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
        self.assertIn("best validation Dice", p.stdout)

    def test_when_one_rank_fails_the_others_exit_quietly_and_the_last_line_is_the_cause(self):
        out = self.out("full")
        p = self.train(out, epochs=1, check=False, env={"VOLSHARD_INJECT_WRITE_FAILURE": "checkpoint.pt:enospc"})
        self.assertEqual(p.returncode, 1, p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertRegex(lines[-1], r"^volshard train: rank 0: error: .*checkpoint\.pt: write failed .* "
                                    r"No space left on device$")
        # Rank 1 lost rank 0's store: not a cause, no c10d stack traces.
        self.assertNotIn("lost rank", p.stderr)
        self.assertNotIn("frame #", p.stderr)
        self.assertLessEqual(len(lines), 12, p.stderr)

    def test_killed_or_disk_full_while_writing_a_checkpoint_keeps_the_previous_one(self):
        out = self.out("run")
        self.train(out, epochs=1)
        with open(os.path.join(out, "checkpoint.pt"), "rb") as f:
            before = f.read()
        for mode, code in (("kill", None), ("enospc", 1)):
            p = run("train", "--data", self.data, "--out", out, "--epochs", 2, "--val-fraction", "0.25",
                    "--nproc-per-node", 1, *SMALL, "--resume", out,
                    env={"VOLSHARD_INJECT_WRITE_FAILURE": "checkpoint.pt:" + mode})
            self.assertNotEqual(p.returncode, 0)
            if code is not None:
                self.assertIn("checkpoint.pt", p.stderr)
                self.assertIn("No space left on device", p.stderr)
            with open(os.path.join(out, "checkpoint.pt"), "rb") as f:
                self.assertEqual(f.read(), before, mode)
        p = self.train(out, "--resume", out, nproc=1)
        self.assertIn("done after 9 steps", p.stdout)  # epoch 1 at W=2 (3 steps), epoch 2 at W=1 (6)
        # The killed write's temporary file was cleaned up by the next run.
        self.assertEqual([f for f in os.listdir(out) if ".tmp-" in f], [])

    def test_corrupt_or_truncated_checkpoints_are_rejected_not_half_loaded(self):
        out = self.out("run")
        self.train(out, epochs=1)
        path = os.path.join(out, "checkpoint.pt")
        with open(path, "rb") as f:
            good = f.read()
        with open(os.path.join(out, "model.pt"), "rb") as f:
            model_bytes = f.read()
        for name, data, message in (
                ("truncated", good[: len(good) // 2], "not a PyTorch archive (no zip directory: truncated?)"),
                ("flipped", good[:len(good) // 2] + bytes([good[len(good) // 2] ^ 0xFF]) + good[len(good) // 2 + 1:],
                 "fails its CRC-32 check"),
                ("not a checkpoint", model_bytes, "not a volshard checkpoint")):
            with open(path, "wb") as f:
                f.write(data)
            p = self.train(out, "--resume", out, nproc=1, check=False)
            self.assertNotEqual(p.returncode, 0, name)
            self.assertIn(message, p.stderr, name)
            self.assertIn(path, p.stderr, name)

    def test_bad_model_files_are_refused_by_every_reader_and_nothing_is_written(self):
        # The crashing files of issue 26's probe (tests/fuzz/archive_corpus), a
        # zip bomb (a compressed record) and a bit flip in model.pt's weights.
        out = self.out("run")
        self.train(out, epochs=1, nproc=1)
        corpus = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "archive_corpus")
        bad = {name: os.path.join(corpus, name) for name in (
            "empty_pops.pt", "appends_on_empty.pt", "setitem_on_empty.pt", "nested_tuple1.pt",
            "huge_string.pt", "global_os_system.pt", "storage_claims_more.pt")}
        import zipfile
        bomb = os.path.join(self.root, "bomb.pt")
        with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("archive/data.pkl", b"\x80\x02}." + b"\x00" * (8 << 20))
        bad["bomb.pt"] = bomb
        with open(os.path.join(out, "model.pt"), "rb") as f:
            model = bytearray(f.read())
        model[len(model) // 2] ^= 0x04  # inside the weights' records
        flipped = os.path.join(self.root, "flipped.pt")
        with open(flipped, "wb") as f:
            f.write(model)
        bad["flipped.pt"] = flipped
        img = os.path.join(self.data, "img7.nii.gz")
        for name, path in bad.items():
            pred = os.path.join(self.root, "pred.nii.gz")
            p = run("predict", "--model", path, "--config", os.path.join(out, "config.json"), "--image", img,
                    "--out", pred)
            self.assertNotEqual(p.returncode, 0, name)
            self.assertLess(p.returncode, 128, (name, p.stderr))  # refused, not killed by a signal
            self.assertIn(path, p.stderr, name)
            self.assertFalse(os.path.exists(pred), name)
            p = self.train(self.out("init_" + name), "--init-weights", path, nproc=1, epochs=1, check=False)
            self.assertNotEqual(p.returncode, 0, name)
            self.assertLess(p.returncode, 128, (name, p.stderr))
            self.assertIn(path, p.stderr, name)
        p = run("predict", "--model", flipped, "--config", os.path.join(out, "config.json"), "--image", img,
                "--out", os.path.join(self.root, "pred.nii.gz"))
        self.assertIn("fails its CRC-32 check", p.stderr)

    def test_every_size_has_a_bound_that_names_the_option_and_the_limit(self):
        # The probe's values: each aborted, hung or ended in std::bad_alloc.
        env = dict(os.environ, VOLSHARD_MEMORY_BYTES=str(24 * 10**9))  # the figures below assume 24 GB
        for extra, needles in (
                (["--workers", 100000], ["--workers=100000", "[0, 256]"]),
                (["--threads", 100000], ["--threads=100000", "[0, 256]"]),
                (["--batch-size", 1000000000], ["--batch-size=1000000000", "needs", "this machine has 24 GB"]),
                (["--num-samples", 1000000000], ["--num-samples=1000000000", "4096"]),
                (["--channels", "4,1000000000", "--strides", "2"], ["channels", "1000000000"]),
                (["--roi", 100000], ["--roi=100000", "each in [1, 4096]"]),
                (["--roi", "4000,4000,4000"], ["--roi=4000,4000,4000", "TB of memory", "24 GB"]),
                (["--crop", "64,5000,64"], ["--crop=64,5000,64", "each in [1, 4096]"])):
            out = self.out("bounds")
            small = list(SMALL)
            for flag in extra[0::2]:  # the value under test replaces SMALL's
                if flag in small:
                    del small[small.index(flag):small.index(flag) + 2]
            p = run("train", "--data", self.data, "--out", out, "--epochs", 1, *small, *extra, env=env)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            for needle in needles:
                self.assertIn(needle, p.stderr, extra)
            self.assertFalse(os.path.exists(out), extra)  # refused before the run folder is made
        for args, needle in ((["synth", "--out", self.out("s1"), "--count", 1, "--size", 100000], "needs 16 PB"),
                             (["synth", "--out", self.out("s2"), "--count", 10**11, "--size", 64], "[0, 100000]"),
                             (["preview", "--data", self.data, "--out", os.path.join(self.root, "p.png"),
                               "--count", 10**9, "--crop", 32], "[1, 256]")):
            p = run(*args, env=env)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(needle, p.stderr, args)
        out = self.out("pixdim")
        p = run("train", "--data", self.data, "--out", out, "--epochs", 1, *SMALL, "--pixdim", "0.001,0.001,0.001",
                env=env)
        self.assertNotEqual(p.returncode, 0)
        self.assertLess(p.returncode, 128, p.stderr)  # refused, not killed
        self.assertIn("pixdim=0.001,0.001,0.001", p.stderr)
        self.assertIn("needs", p.stderr)

    def test_nothing_a_command_reads_is_replaced_and_bad_lists_and_keys_are_refused(self):
        out = self.out("run")
        self.train(out, epochs=1, nproc=1)
        img = os.path.join(self.data, "img7.nii.gz")
        seg = os.path.join(self.data, "seg7.nii.gz")
        with open(img, "rb") as f:
            before = f.read()
        p = run("predict", "--model", os.path.join(out, "model.pt"), "--config", os.path.join(out, "config.json"),
                "--image", img, "--out", img)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("is --image's file", p.stderr)
        # prepare into the inputs' own folder, under the names it writes
        folder = os.path.join(self.root, "inputs")
        os.makedirs(folder, exist_ok=True)
        shutil.copy(img, os.path.join(folder, "image.nii.gz"))
        shutil.copy(seg, os.path.join(folder, "label.nii.gz"))
        p = run("prepare", "--image", os.path.join(folder, "image.nii.gz"), "--label",
                os.path.join(folder, "label.nii.gz"), "--out", folder)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("is --image's file", p.stderr)
        with open(os.path.join(folder, "image.nii.gz"), "rb") as f:
            self.assertEqual(f.read(), before)
        with open(img, "rb") as f:
            self.assertEqual(f.read(), before)
        # synth into a folder of another data set would mix the two
        p = run("synth", "--out", self.data, "--count", 2, "--size", 64)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("would not replace: the folder would mix two data sets", p.stderr)
        self.assertEqual(len([f for f in os.listdir(self.data) if f.startswith("img")]), 8)
        # misspelt keys in a config given to predict or prepare, as train refuses them
        bad = os.path.join(self.root, "bad.json")
        with open(bad, "w") as f:
            json.dump({"pixdims": [1, 1, 1]}, f)
        for args in (["predict", "--model", os.path.join(out, "model.pt"), "--image", img, "--out",
                      os.path.join(self.root, "p.nii.gz")],
                     ["prepare", "--image", img, "--out", os.path.join(self.root, "prepared")]):
            p = run(*args, "--config", bad)
            self.assertEqual(p.returncode, 2, (args[0], p.stderr))
            self.assertIn("unknown key 'pixdims'", p.stderr)
        # a NUL byte in a datalist path, and one case in both lists
        for name, entries, needle in (
                ("nul", {"training": [{"image": img + "\u0000x", "label": seg}]}, "holds a NUL byte"),
                ("both", {"training": [{"image": img, "label": seg},
                                       {"image": os.path.join(self.data, "img0.nii.gz"),
                                        "label": os.path.join(self.data, "seg0.nii.gz")}],
                          "validation": [{"image": img, "label": seg}]}, "is in both \"training\" and")):
            datalist = os.path.join(self.root, name + ".json")
            with open(datalist, "w") as f:
                json.dump(entries, f)  # the NUL is written as \\u0000
            p = run("train", "--datalist", datalist, "--out", self.out(name), "--epochs", 1, *SMALL)
            self.assertNotEqual(p.returncode, 0, name)
            self.assertLess(p.returncode, 128, p.stderr)
            self.assertIn(needle, p.stderr, name)

    def test_resume_checks_what_it_resumes_unless_told_otherwise(self):
        out = self.out("run")
        self.train(out, epochs=1, nproc=1)
        for extra, needle in ((["--seed", 5], "--seed 0 there, 5 here"),
                              (["--crop", 48], "--crop 32 there, 48 here"),
                              (["--channels", "8,16,32,64"], "--channels [4,8,16,32] there, [8,16,32,64] here"),
                              # What changes the data or its augmentation (#43 item 21).
                              (["--rot90-prob", 0.2], "--rot90-prob 0.5 there, 0.2 here"),
                              (["--flip-prob", 0.5], "--flip-prob 0.0 there, 0.5 here"),
                              (["--rand-shift", 0.1], "--rand-shift 0.0 there, 0.1 here"),
                              (["--a-min", -1], "--a-min 0.0 there, -1.0 here"),
                              (["--crop-foreground"], "--crop-foreground false there, true here")):
            small = list(SMALL)
            if extra[0] in small:
                del small[small.index(extra[0]):small.index(extra[0]) + 2]
            p = run("train", "--data", self.data, "--out", out, "--epochs", 2, "--val-fraction", "0.25",
                    "--nproc-per-node", 1, *small, *extra, "--resume", out)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(needle, p.stderr, extra)
            self.assertIn("--resume-anyway", p.stderr)
        # Another data set's checkpoint: named by its folder.
        other = os.path.join(self.root, "other_data")
        shutil.copytree(self.data, other)
        p = run("train", "--data", other, "--out", self.out("other"), "--epochs", 2, "--val-fraction", "0.25",
                "--nproc-per-node", 1, *SMALL, "--resume", out)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--data", p.stderr)
        # The same paths with other contents: another data set too.
        changed = os.path.join(self.root, "changed_data")
        shutil.copytree(self.data, changed)
        run_changed = self.out("changed")
        self.assertEqual(run("train", "--data", changed, "--out", run_changed, "--epochs", 1, "--val-fraction",
                             "0.25", "--nproc-per-node", 1, *SMALL).returncode, 0)
        img = nib.load(os.path.join(changed, "img1.nii.gz"))
        nib.save(nib.Nifti1Image(np.asarray(img.dataobj) * 0.5, img.affine), os.path.join(changed, "img1.nii.gz"))
        p = run("train", "--resume", run_changed, "--epochs", 2)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("img1.nii.gz changed since the checkpoint", p.stderr)
        self.assertIn("--resume-anyway", p.stderr)
        p = self.train(out, "--seed", 5, "--resume", out, "--resume-anyway", nproc=1, epochs=2)
        self.assertIn("done after", p.stdout)

    def test_a_prepare_killed_mid_write_leaves_the_old_pair_whole(self):
        out = os.path.join(self.root, "prepared")
        pair = lambda i: ["--image", os.path.join(self.data, "img%d.nii.gz" % i), "--label",
                          os.path.join(self.data, "seg%d.nii.gz" % i)]
        self.assertEqual(run("prepare", *pair(0), "--out", out).returncode, 0)
        before = {n: open(os.path.join(out, n), "rb").read() for n in ("image.nii.gz", "label.nii.gz")}
        p = run("prepare", *pair(1), "--out", out, env={"VOLSHARD_INJECT_WRITE_FAILURE": ".tmp-label:kill"})
        self.assertEqual(p.returncode, -signal.SIGKILL)
        for name, data in before.items():
            with open(os.path.join(out, name), "rb") as f:
                self.assertEqual(f.read(), data, name)
        self.assertEqual(run("prepare", *pair(1), "--out", out).returncode, 0)
        self.assertEqual(sorted(os.listdir(out)), ["image.nii.gz", "label.nii.gz"])  # the killed run's temporaries go
        self.assertNotEqual(open(os.path.join(out, "label.nii.gz"), "rb").read(), before["label.nii.gz"])

    def test_uneven_validation_over_three_ranks_does_not_hang(self):
        out = self.out("run")
        # 8 pairs, 3 validate (1 + 1 + 1), 5 train: three ranks, n % W != 0 in both.
        p = run("train", "--data", self.data, "--out", out, "--epochs", 1, "--val-fraction", "0.375",
                "--nproc-per-node", 3, *SMALL, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIsNotNone([m for m in metrics(out) if m[0] == "epoch"][0][5])


@unittest.skipUnless(HAS_CUDA, "no CUDA device (the GPU machine runs these: scripts/gpu/run.sh)")
class GpuTest(Base):
    """The binaries on the GPUs this machine has (the other suites hide them)."""

    def train_on_gpus(self, out, *extra, nproc=1):
        return run("train", "--data", self.data, "--out", out, "--epochs", 1, "--val-fraction", "0.25",
                   "--nproc-per-node", nproc, *SMALL, "--device", "cuda", *extra, env=GPUS_SHOWN)

    def test_one_rank_trains_on_the_gpu_and_repeats_bit_identical(self):
        a, b = self.out("a"), self.out("b")
        for out in (a, b):
            p = self.train_on_gpus(out)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("on cuda:0", p.stderr)
        self.assertEqual(metrics(a), metrics(b))  # deterministic algorithms (the default) on the GPU
        self.assertEqual(model_bytes(a), model_bytes(b))

    def test_the_cache_and_augmentation_on_the_gpu_with_fp16_train(self):
        out = self.out("cache")
        p = self.train_on_gpus(out, "--cache-device", "cuda", "--amp", "fp16")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("cache and augmentation on cuda:0 (tensor ops)", p.stderr)
        self.assertTrue(all(m[3] is not None for m in metrics(out) if m[0] == "step"))

    def test_more_ranks_than_gpus_share_them_over_gloo_and_nccl_is_refused_there(self):
        ranks = GPU_COUNT + 1
        p = self.train_on_gpus(self.out("shared"), nproc=ranks)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("%d rank(s) over gloo on cuda:0" % ranks, p.stderr)
        p = self.train_on_gpus(self.out("nccl"), "--backend", "nccl", nproc=ranks)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--backend=nccl: %d ranks on this machine share %d GPU(s)" % (ranks, ranks - 1), p.stderr)


class RunFolderTest(Base):
    """Run folders and resume as a cluster user meets them (issue #43, items 1-5)."""

    def test_a_model_whose_record_names_were_swapped_is_refused(self):
        import zipfile
        out = self.out("swapped")
        self.train(out, "--val-every", 0, "--max-steps", 1, epochs=1)
        model = os.path.join(out, "model.pt")
        with zipfile.ZipFile(model) as z:
            infos = [i for i in z.infolist() if "/data/" in i.filename]
            names = [n for n in z.namelist()]
        self.assertTrue(any(n.endswith("/volshard_records") for n in names), names)
        by_size = collections.defaultdict(list)
        for i in infos:
            by_size[i.file_size].append(i.filename)
        a, b = next(v for v in by_size.values() if len(v) >= 2 and len(v[0]) == len(v[1]))[:2]
        # The names swapped where the zip keeps them (local headers, central directory); each
        # record's own CRC still holds, so only the list of names and CRCs can tell.
        with open(model, "rb") as f:
            swapped = swap_zip_names(f.read(), a, b)
        bad = self.out("swapped.pt")
        with open(bad, "wb") as f:
            f.write(swapped)
        image = os.path.join(self.data, "img7.nii.gz")
        p = run("predict", "--model", bad, "--config", os.path.join(out, "config.json"), "--image", image,
                "--out", self.out("swapped_pred.nii.gz"))
        self.assertNotEqual(p.returncode, 0)
        self.assertRegex(p.stderr, r"record (%s|%s) is not the one written under that name"
                         % (re.escape(a.split("/", 1)[1]), re.escape(b.split("/", 1)[1])))
        p = run("predict", "--model", model, "--config", os.path.join(out, "config.json"), "--image", image,
                "--out", self.out("pred.nii.gz"))
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_a_datalist_naming_a_volume_twice_is_refused(self):
        listing = self.out("dup.json")
        pairs = [{"image": os.path.join(self.data, "img%d.nii.gz" % i),
                  "label": os.path.join(self.data, "seg%d.nii.gz" % i)} for i in (0, 1, 2, 1)]
        with open(listing, "w") as f:
            json.dump({"training": pairs}, f)
        p = run("train", "--datalist", listing, "--out", self.out("dup"), *SMALL)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("training[1] and training[3] name the same image %s: list each volume once"
                      % pairs[1]["image"], p.stderr)

    def test_a_second_run_into_a_held_folder_is_refused_naming_it_and_a_dead_holders_lock_is_taken_over(self):
        out = self.out("twin")
        first = self.popen_train(out, "--val-every", 0, epochs=50)
        try:
            wait_for_step(out, 1, first)
            p = self.train(out, "--overwrite", check=False)  # a requeued job overlapping the old one
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertRegex(p.stderr, r"is held by a run: host %s, pid %d \(volshard train\), started "
                             % (re.escape(socket.gethostname()), first.pid))
            self.assertIn("give another --out", p.stderr)
            resumed = run("train", "--resume", out)
            self.assertEqual(resumed.returncode, 2, resumed.stderr)
            self.assertIn("is held by a run", resumed.stderr)
        finally:
            os.killpg(first.pid, signal.SIGKILL)  # no clean exit: the lock stays behind
            first.communicate()
        self.assertTrue(os.path.exists(os.path.join(out, "run.lock")))
        # Its holder is gone: the next start takes the lock over and says whose it was.
        p = self.train(out, "--overwrite", "--val-every", 0, "--max-steps", 1, epochs=1)
        self.assertIn("taking over a stale lock (host %s, pid %d" % (socket.gethostname(), first.pid), p.stderr)
        self.assertIn("pid %d is gone" % first.pid, p.stderr)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "run.lock")), "a finished run lets go of its folder")

    def test_resume_alone_restarts_the_recorded_world_size_and_an_elastic_resume_says_so(self):
        ref, out, elastic = self.out("ref"), self.out("stopped"), self.out("elastic")
        self.train(ref, "--val-every", 0)
        p = self.train(out, "--val-every", 0, "--max-steps", 3)
        self.assertIn("resume with: --resume " + out, p.stdout)
        with open(os.path.join(out, "launch.json")) as f:
            self.assertEqual(json.load(f), {"nproc_per_node": 2, "nnodes": 1})
        p = run("train", "--resume", out)  # the hint, exactly
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("2 rank(s) over gloo", p.stderr)
        self.assertNotIn("an elastic resume", p.stderr)
        self.assertEqual(model_bytes(ref), model_bytes(out))
        # Another world size is said in one line, and the progress ends at its own total.
        self.train(elastic, "--val-every", 0, "--max-steps", 3)
        p = run("train", "--resume", elastic, "--nproc-per-node", 1)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("on 1 rank(s), where it trained on 2: an elastic resume", p.stderr)
        progress = re.findall(r"step ([0-9]+)/([0-9]+) loss", p.stdout)  # not a tty: lines on stdout
        self.assertTrue(progress, p.stdout)
        self.assertEqual(progress[-1][0], progress[-1][1], progress)
        with open(os.path.join(elastic, "metrics.jsonl")) as f:
            last = [json.loads(l) for l in f if '"type":"step"' in l][-1]["step"]
        self.assertEqual(int(progress[-1][0]), last)
        # diff names the world size change as the cause, with its step.
        d = run("diff", ref, elastic)
        self.assertEqual(d.returncode, 1, d.stdout + d.stderr)
        self.assertIn("world size: 2 (A), 2, then 1 from step 4 (B)", d.stdout)
        self.assertIn("B resumed on another world size at step 4 (2 -> 1 ranks: an elastic resume", d.stdout)
        self.assertNotIn("the data files", d.stdout)

    def test_resume_names_a_missing_run_and_a_complete_one(self):
        p = run("train", "--resume", self.out("nonexistent_run"))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--resume=%s: no such run" % self.out("nonexistent_run"), p.stderr)
        self.assertNotIn("--datalist", p.stderr)
        done = self.out("done")
        self.train(done, "--val-every", 0, epochs=1)
        p = run("train", "--resume", done)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("the run is complete: it trained 1 epoch(s)", p.stderr)
        self.assertIn("--resume=%s --epochs=2 (or more)" % done, p.stderr)
        p = run("train", "--resume", done, "--epochs", 2)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("resuming epoch 2/2 (sampler epoch 1, 0-based as sampler-inspect's)", p.stderr)

    def test_resume_writes_into_the_run_it_is_given_and_takes_no_path_from_its_config(self):
        orig = self.out("orig")
        self.train(orig, "--val-every", 0, "--max-steps", 1, "--trace-samples", orig + ".trace")
        copy, victim = self.out("copy"), self.out("victim")
        shutil.copytree(orig, copy)
        os.makedirs(victim)
        with open(os.path.join(victim, "config.json"), "w") as f:
            f.write("victim's\n")
        with open(os.path.join(copy, "config.json")) as f:
            config = json.load(f)
        config["out"] = victim  # a tampered (or merely copied) run folder
        with open(os.path.join(copy, "config.json"), "w") as f:
            json.dump(config, f)
        before = {n: open(os.path.join(orig, n), "rb").read() for n in ("checkpoint.pt", "metrics.jsonl")}
        p = run("train", "--resume", copy)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("not taken from a run's config: \"trace_samples\"", p.stderr)
        for name, data in before.items():  # the original is not advanced
            with open(os.path.join(orig, name), "rb") as f:
                self.assertEqual(f.read(), data, name)
        with open(os.path.join(victim, "config.json")) as f:
            self.assertEqual(f.read(), "victim's\n")
        self.assertIn("done after", p.stdout)
        with open(os.path.join(copy, "config.json")) as f:
            self.assertEqual(json.load(f)["out"], copy)

    def test_the_trace_and_predicts_output_never_replace_what_a_command_reads(self):
        out = self.out("run")
        self.train(out, "--val-every", 0, "--max-steps", 1)
        for target, flag in ((os.path.join(out, "checkpoint.pt"), "--resume's file"),
                             (os.path.join(out, "metrics.jsonl"), "--out's file"),
                             (os.path.join(self.data, "img0.nii.gz"), "--data's file")):
            before = open(target, "rb").read()
            p = run("train", "--resume", out, "--trace-samples", target)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--trace-samples=%s is %s: volshard never writes over what it reads" % (target, flag),
                          p.stderr)
            self.assertEqual(open(target, "rb").read(), before)
        config = os.path.join(out, "config.nii.gz")  # a config named as predict's outputs are
        shutil.copy(os.path.join(out, "config.json"), config)
        p = run("predict", "--model", os.path.join(out, "model.pt"), "--config", config,
                "--image", os.path.join(self.data, "img0.nii.gz"), "--out", config)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("predict: --out=%s is --config's file" % config, p.stderr)
        # prepare of an image alone leaves no older label beside it.
        prepared = self.out("prepared")
        img, seg = os.path.join(self.data, "img0.nii.gz"), os.path.join(self.data, "seg0.nii.gz")
        self.assertEqual(run("prepare", "--image", img, "--label", seg, "--out", prepared).returncode, 0)
        self.assertEqual(run("prepare", "--image", img, "--out", prepared).returncode, 0)
        self.assertEqual(sorted(os.listdir(prepared)), ["image.nii.gz"])

    def test_best_model_json_names_the_weights_it_describes_and_predict_checks_them(self):
        import zlib
        out = self.out("best")
        self.train(out, epochs=1)
        pt, record = os.path.join(out, "best_model.pt"), os.path.join(out, "best_model.json")
        with open(pt, "rb") as f, open(record) as r:
            self.assertEqual(json.load(r)["weights_crc32"], "%08x" % zlib.crc32(f.read()))
        image = os.path.join(self.data, "img6.nii.gz")
        p = run("predict", "--model", pt, "--config", os.path.join(out, "config.json"), "--image", image,
                "--out", self.out("pred.nii.gz"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("describes other weights", p.stderr)
        # A kill between the two writes leaves new weights beside the old record: said on read.
        state = torch.load(pt)
        torch.save({k: v + 1 if v.is_floating_point() else v for k, v in state.items()}, pt)
        p = run("predict", "--model", pt, "--config", os.path.join(out, "config.json"), "--image", image,
                "--out", self.out("pred.nii.gz"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("best_model.json describes other weights than %s" % pt, p.stderr)

    def test_init_weights_take_a_checkpoint_and_a_resumed_run_needs_them_no_more(self):
        first = self.out("first")
        self.train(first, "--val-every", 0, epochs=1)
        init = self.out("init.pt")
        shutil.copy(os.path.join(first, "checkpoint.pt"), init)
        second = self.out("second")
        p = self.train(second, "--val-every", 0, "--init-weights", init, "--max-steps", 1, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)  # docs/training.md: a checkpoint.pt is taken
        os.remove(init)
        p = run("train", "--resume", second)
        self.assertEqual(p.returncode, 0, p.stderr)  # the checkpoint holds the weights
        self.assertIn("done after", p.stdout)

    def test_numbers_past_what_can_work_are_refused_by_name(self):
        for extra, said in ((["--timeout", "1e300"], "must be in (0, 604800]"),
                            (["--weight-decay", "inf"], "--weight-decay=inf"),
                            (["--smooth-nr", "inf"], "--smooth-nr=inf"),
                            (["--lambda-dice", "inf"], "--lambda-dice=inf"),
                            ({"nproc": 1000}, "--nproc-per-node=1000 on a machine with")):
            kw = extra if isinstance(extra, dict) else {}
            p = self.train(self.out("numbers"), *([] if kw else extra), check=False, **kw)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(said, p.stderr, extra)

    def test_a_fresh_run_refuses_a_folder_of_someone_elses_files_and_keeps_others(self):
        out = self.out("foreign")
        os.makedirs(out)
        for name, text in (("metrics.jsonl", "mine\n"), ("notes.txt", "keep me\n")):
            with open(os.path.join(out, name), "w") as f:
                f.write(text)
        p = self.train(out, epochs=1, check=False)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("--out=%s holds metrics.jsonl but no config.json" % out, p.stderr)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            self.assertEqual(f.read(), "mine\n")
        os.remove(os.path.join(out, "metrics.jsonl"))
        self.train(out, "--val-every", 0, "--max-steps", 1, epochs=1)
        with open(os.path.join(out, "notes.txt")) as f:
            self.assertEqual(f.read(), "keep me\n")  # a run writes its own names only


def main():
    global BINARY, FIXTURES
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "trainer", "fixtures"))
    args, rest = parser.parse_known_args()
    BINARY = os.path.abspath(args.binary)
    FIXTURES = os.path.abspath(args.fixtures)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
