#!/usr/bin/env python3
"""The MONAI oracle in every test run: runs make_monai_goldens.py with the
pinned environment's MONAI and torch into a scratch folder and checks that it
writes the committed goldens bit for bit, or within 1e-6 of a file's largest
value where this CPU's vector kernels round otherwise (transforms_tests compares volshard
with the committed ones). A difference names each file, its largest change and
how many values moved; regenerate with the same script when MONAI or torch is
re-pinned, and say so in the commit.

    compare_goldens.py SCRATCH_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def pinned_blas_env():
    """numpy's OpenBLAS picks its kernels by CPU: on an AVX-512 machine
    (SkylakeX kernels) MONAI's oblique output affines and 4 bilinear values move
    by an ulp against the Haswell kernels the goldens were written with
    (measured 2026-11-25). The generator runs with the Haswell kernels wherever
    the CPU has AVX2, so the oracle is the same on every such x86 machine."""
    env = dict(os.environ)
    try:
        with open("/proc/cpuinfo") as f:
            avx2 = " avx2" in f.read()
    except OSError:
        avx2 = False
    if avx2:
        env.setdefault("OPENBLAS_CORETYPE", "Haswell")
    return env
COMMITTED = os.path.join(HERE, "monai_goldens")


def main():
    out = sys.argv[1]
    subprocess.run([sys.executable, "-W", "ignore::FutureWarning", os.path.join(HERE, "make_monai_goldens.py"), "--out", out], check=True,
                   stdout=subprocess.DEVNULL, env=pinned_blas_env())
    fresh = json.load(open(os.path.join(out, "manifest.json")))
    committed = json.load(open(os.path.join(COMMITTED, "manifest.json")))
    problems = []
    if (fresh["monai"], fresh["torch"]) != (committed["monai"], committed["torch"]):
        problems.append(f"versions: committed MONAI {committed['monai']} / torch {committed['torch']}, "
                        f"this environment {fresh['monai']} / {fresh['torch']}")
    if fresh["cases"] != committed["cases"]:
        problems.append("manifest.json: cases (parameters, shapes or affines) differ")
    rounding = []
    for name in sorted(os.listdir(COMMITTED)):
        if not name.endswith(".f32"):
            continue
        a = np.fromfile(os.path.join(COMMITTED, name), dtype="<f4")
        path = os.path.join(out, name)
        if not os.path.exists(path):
            problems.append(f"{name}: not written any more")
            continue
        b = np.fromfile(path, dtype="<f4")
        if a.shape != b.shape:
            problems.append(f"{name}: {a.size} values committed, {b.size} now")
        elif a.tobytes() != b.tobytes():
            d = np.abs(a.astype(np.float64) - b)
            what = f"{name}: {(d > 0).sum()} of {a.size} values differ, largest by {d.max():.3g}"
            # ATen picks its vector kernels by CPU (AVX2, AVX-512): torch.pow rounds some values one
            # float32 step apart between them (RandAdjustContrast, measured 1.2e-7 of the largest).
            # Within 1e-6 of the file's largest value is that, said; more is MONAI or torch moving.
            if d.max() <= 1e-6 * max(1.0, float(np.abs(a).max())):
                rounding.append(what)
            else:
                problems.append(what)
    if rounding:
        print("within 1e-6 of the largest value (this CPU's vector kernels round otherwise):\n  " +
              "\n  ".join(rounding))
    if problems:
        print("MONAI no longer writes the committed goldens:\n  " + "\n  ".join(problems))
        return 1
    print(f"MONAI {fresh['monai']} with torch {fresh['torch']} writes the {len(fresh['cases'])} committed cases "
          "bit for bit" + (", but for the rounding above" if rounding else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
