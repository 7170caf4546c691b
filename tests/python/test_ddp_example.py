"""examples/train_ddp.py as two processes over Gloo on tiny data."""

import json
import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_ddp.py")


def test_two_ranks_train_and_see_disjoint_indices(synth_data, tmp_path, reserved_port):
    port = reserved_port
    procs = []
    for rank in range(2):
        # PYTHONFAULTHANDLER: a rank that aborts (SIGABRT, SIGSEGV) prints every thread's Python stack.
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE="2",
                   LOCAL_RANK=str(rank), OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
        cmd = [sys.executable, EXAMPLE, "--data", synth_data, "--epochs", "1", "--crop", "16",
               "--num-samples", "2", "--batch-size", "1", "--workers", "1", "--channels", "4,8,16",
               "--out", str(tmp_path / "run"), "--indices-out", str(tmp_path / f"rank{rank}.json")]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    report = "\n".join(f"--- rank {r} (exit {p.returncode}):\n{out}" for r, (p, out) in enumerate(zip(procs, outputs)))
    assert all(p.returncode == 0 for p in procs), report
    assert "epoch 1/1: loss" in outputs[0]
    seen = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert [s["world_size"] for s in seen] == [2, 2]
    a, b = (set(s["indices"]) for s in seen)
    assert a.isdisjoint(b) and a | b == set(range(6))
    assert os.path.exists(tmp_path / "run" / "ckpt.pt")
