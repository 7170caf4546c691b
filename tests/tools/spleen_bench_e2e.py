#!/usr/bin/env python3
"""bench/spleen_monai.py small, as a user runs it (issue 42 item 6's tables): on one synthetic
384 x 384 x 96 CT volume, one epoch, one round, the plain table (prefix, files, cached), `--augment`
(RandAffine and the intensity steps on both sides) and `--steps` (each augmentation alone, both
sides). Each prints every row with a figure for both sides; the figures are not checked (a smoke
test: speed lives in bench/README.md). Skipped (exit 77) where MONAI is not importable.

  spleen_bench_e2e.py --binary build/bin/volshard
"""
import argparse
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BINARY = None
os.environ["CUDA_VISIBLE_DEVICES"] = ""


def spleen_bench(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(BINARY), "..", "python"))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "spleen_monai.py"), "--bin", BINARY,
                        "--volumes", "1", "--epochs", "1", "--rounds", "1", *args],
                       capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise AssertionError(f"spleen_monai.py {' '.join(args)} exited with {p.returncode}:\n"
                             f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def table(out):
    """{(source, side): (wall, cpu, peak)} of a table's rows."""
    rows = re.findall(r"^(prefix|files|cached) +(monai|monai_tuned|volshard) +\| +(\S+) +(\S+) +(\S+) \|", out, re.M)
    return {(source, side): tuple(map(float, figures)) for source, side, *figures in rows}


class SpleenBenchTest(unittest.TestCase):
    def check_table(self, out, sources):
        rows = table(out)
        self.assertEqual(sorted(rows), sorted((source, side) for source in sources
                                              for side in ("monai", "monai_tuned", "volshard")), out)
        for figures in rows.values():
            self.assertTrue(all(f > 0 for f in figures), out)
        ratios = re.findall(r"^(\S+) +volshard +\| .* \| +(\S+)x +(\S+)x +(\S+)x$", out, re.M)
        self.assertEqual([r[0] for r in ratios], list(sources), out)

    def test_the_plain_table_has_every_source_and_side(self):
        out = spleen_bench()
        self.assertIn("spleen pipeline (configs/spleen.json; MONAI 1.4's notebook transforms) on 1 synthetic", out)
        self.check_table(out, ("prefix", "files", "cached"))

    def test_augment_runs_randaffine_and_the_intensity_steps_on_both_sides(self):
        out = spleen_bench("--augment")
        self.assertIn("+ RandAffine, RandGaussianNoise, RandGaussianSmooth, RandScaleIntensity, "
                      "RandShiftIntensity, RandAdjustContrast, each prob 1", out)
        self.check_table(out, ("files", "cached"))

    def test_steps_prints_each_augmentation_for_both_sides(self):
        out = spleen_bench("--steps")
        rows = re.findall(r"^(.+?) +\| +(-?\d+\.\d) +(-?\d+\.\d) \| +\S+x$", out, re.M)
        self.assertEqual([r[0] for r in rows],
                         ["the crop alone", "RandAffine", "Rand3DElastic", "RandGaussianNoise", "RandGaussianSmooth",
                          "RandScaleIntensity + RandShiftIntensity", "RandAdjustContrast", "RandBiasField"], out)
        self.assertTrue(float(rows[0][1]) > 0 and float(rows[0][2]) > 0, out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    a, rest = ap.parse_known_args()
    BINARY = os.path.abspath(a.binary)
    try:
        import monai  # noqa: F401
    except ImportError:
        print("SKIP: MONAI is not importable (the pinned environment has it: make deps)")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0], *rest])
