#!/usr/bin/env python3
"""The Hippocampus benchmarks small (bench/hippocampus.py and bench/hippocampus_monai.py, issue 44
items 1-2): both scripts on the first 10 cases of the Decathlon's Task04 (../shared/data beside the
clone), 4 epochs (validated after the 2nd and 4th), 2 seeds a side, as a user runs them. Both use the trainer's split (the last fifth
validates), volshard's side gives the same Dice from either script (one command, deterministic), and
the seed intervals print. Then hippocampus.py --test-fifth (1 epoch: the split and the test fifth's
scores) and hippocampus_pipeline.py on 2 cases (both sides run the augmented config's steps).
Skipped (exit 77) with the reason where the data is absent.

  hippocampus_bench_e2e.py --binary build/bin/volshard --data ../shared/data/msd_hippocampus
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BINARY = DATA = None
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the CPU's figures, also on a machine with a GPU


def bench(script, *args):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.path.join(os.path.dirname(BINARY), "..", "python")  # the built module, as the docs say
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", script), "--bin", BINARY, *map(str, args)],
                       capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        raise AssertionError(f"{script} exited with {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


class HippocampusBenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="volshard_hippocampus_bench_")
        cls.data = os.path.join(cls.tmp.name, "ten")
        with open(os.path.join(DATA, "dataset.json")) as f:
            decathlon = json.load(f)
        decathlon["training"] = decathlon["training"][:10]
        for sub in ("imagesTr", "labelsTr"):
            os.makedirs(os.path.join(cls.data, sub))
        for case in decathlon["training"]:
            for key in ("image", "label"):
                os.symlink(os.path.abspath(os.path.join(DATA, case[key])), os.path.join(cls.data, case[key]))
        with open(os.path.join(cls.data, "dataset.json"), "w") as f:
            json.dump(decathlon, f)
        cls.held_out = [os.path.basename(c["image"]) for c in decathlon["training"][8:]]
        out = os.path.join(cls.tmp.name, "volshard")
        cls.volshard = bench("hippocampus.py", "--data", cls.data, "--out", out, "--seeds", 2, "--", "--epochs", 4, "--val-every", 2)
        with open(os.path.join(out, "split.json")) as f:
            cls.split = json.load(f)
        cls.side_by_side = bench("hippocampus_monai.py", "--data", cls.data, "--out", os.path.join(cls.tmp.name, "both"),
                                 "--epochs", 4, "--val-every", 2, "--seeds", 2)
        cls.test_out = os.path.join(cls.tmp.name, "test_fifth")
        cls.test_fifth = bench("hippocampus.py", "--data", cls.data, "--out", cls.test_out, "--test-fifth",
                               "--", "--epochs", 1, "--val-every", 1)
        cls.pipeline = bench("hippocampus_pipeline.py", "--data", cls.data, "--out", os.path.join(cls.tmp.name, "feed"),
                             "--volumes", 2, "--epochs", 1, "--rounds", 1)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_held_out_cases_are_the_trainers(self):
        self.assertEqual(self.split["training"], 8)
        self.assertEqual(self.split["validation"], self.held_out)
        self.assertIn("8 training cases, 2 held out, 2 ranks on CPU", self.volshard)

    def test_volshards_side_scores_alike_in_both_scripts(self):
        # Each seed's best validation (its epoch and mean Dice), as each script prints it.
        best = [(int(e), float(m)) for e, m in
                re.findall(r"^best: epoch (\d+), mean foreground Dice (\S+)", self.volshard, re.M)]
        rows = {int(s): (int(e), float(m)) for s, m, e in
                re.findall(r"^\| volshard, (\d) \| \S+, \S+, \S+ \| (\S+) \((\d+)\) \|", self.side_by_side, re.M)}
        self.assertEqual(len(best), 2, self.volshard)
        self.assertEqual(rows, {0: best[0], 1: best[1]}, self.side_by_side)

    def test_monais_side_trains_and_validates_on_the_same_split(self):
        rows = re.findall(r"^\| monai, (\d) \| (\S+), (\S+), (\S+) \|", self.side_by_side, re.M)
        self.assertEqual([r[0] for r in rows], ["0", "1"], self.side_by_side)
        for _, anterior, posterior, mean in rows:
            a, p, m = float(anterior), float(posterior), float(mean)
            self.assertTrue(0 < m < 1 and min(a, p) <= m <= max(a, p), (a, p, m))

    def test_the_test_fifth_is_held_out_of_training_and_scored_once_with_the_best_weights(self):
        with open(os.path.join(self.test_out, "split.json")) as f:
            split = json.load(f)
        names = [os.path.basename(c["image"]) for c in json.load(open(os.path.join(DATA, "dataset.json")))["training"][:10]]
        self.assertEqual((split["training"], split["validation"], split["test"]), (6, names[8:], names[6:8]))
        self.assertIn("6 training cases, 2 held out", self.test_fifth)
        self.assertIn("/run (best_model.pt), 2 test volumes", self.test_fifth)
        with open(os.path.join(self.test_out, "test_scores.json")) as f:
            scores = json.load(f)
        self.assertEqual(list(scores), ["plain", "Gaussian blending", "mirroring over x, y, z (8 passes)",
                                        "largest component per class", "all three"])
        for row in scores.values():
            self.assertTrue(0 <= row["mean"] <= 1, row)
        self.assertRegex(self.test_fifth, r"\| plain \| \S+ \| \S+ \| %.4f \| \+0\.0000 \|" % scores["plain"]["mean"])

    def test_the_augmented_feed_runs_on_both_sides_with_the_same_steps(self):
        self.assertIn("RandAffine p 0.2, RandFlip x3 p 0.5, RandGaussianNoise p 0.1, RandGaussianSmooth p 0.2, "
                      "RandScaleIntensity p 0.15, RandAdjustContrast p 0.3", self.pipeline)
        ratios = re.findall(r"^(files|cached) +volshard +\| .* \| +(\S+)x +(\S+)x$", self.pipeline, re.M)
        self.assertEqual([r[0] for r in ratios], ["files", "cached"], self.pipeline)
        for _, wall, cpu in ratios:
            self.assertGreater(float(cpu), 0, self.pipeline)

    def test_the_seed_intervals_print(self):
        self.assertRegex(self.volshard, r"- final mean foreground Dice: \S+ \+- \S+ \(sd\), 95 % interval "
                                        r"\[\S+, \S+\], 2 seeds")
        self.assertRegex(self.side_by_side, r"- volshard - MONAI: \S+, 95 % interval \[\S+, \S+\] \(Welch\): "
                                            r"(within|beyond) seed noise")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--data", required=True)
    a, rest = ap.parse_known_args()
    BINARY, DATA = os.path.abspath(a.binary), os.path.abspath(a.data)
    if not os.path.exists(os.path.join(DATA, "dataset.json")):
        print(f"SKIP: {DATA}/dataset.json is absent (the Decathlon's Task04; CI has it in ../shared/data)")
        sys.exit(77)
    try:
        import monai  # noqa: F401
    except ImportError:
        print("SKIP: MONAI is not importable (the pinned environment has it: make deps)")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0], *rest])
