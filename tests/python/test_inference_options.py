"""bench/inference_options.py, the inference options' Dice on a trained run (issue 44 item 3): its
plain row is the trainer's own validation Dice for the same weights, and every option has its row."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("monai")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "inference_options.py")


def test_the_plain_row_is_the_trainers_validation_dice(tmp_path, volshard_bin, synth_data):
    run = tmp_path / "run"
    subprocess.run([volshard_bin, "train", "--data", synth_data, "--out", str(run), "--activation", "softmax",
                    "--out-channels", "2", "--crop", "32", "--roi", "32", "--channels", "4,8", "--strides", "2",
                    "--res-units", "1", "--epochs", "2", "--val-every", "1", "--nproc-per-node", "1"],
                   check=True, capture_output=True)
    epochs = [json.loads(line) for line in open(run / "metrics.jsonl") if '"type":"epoch"' in line.replace(" ", "")]
    trained = epochs[-1]["val_dice"]  # model.pt holds the weights this validation scored
    p = subprocess.run([sys.executable, SCRIPT, "--run", str(run), "--weights", "model.pt"], capture_output=True,
                       text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in p.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| inference") and not line.startswith("| ---")}
    assert list(rows) == ["plain", "Gaussian blending", "mirroring over x, y, z (8 passes)",
                          "largest component per class", "all three"]
    assert float(rows["plain"][2]) == pytest.approx(trained, abs=1e-4)
    assert float(rows["plain"][3]) == 0.0  # the difference column
