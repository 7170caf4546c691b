#!/usr/bin/env python3
"""nibabel side of bench_nifti.

Reads commands on stdin, one per line, answers one line each:
  make DIR          writes DIR/noisy.nii.gz and DIR/clean.nii.gz (128^3 float32,
                    nib.save at nibabel's default compresslevel) -> "ok"
  load PATH MODE    loads PATH once and prints the seconds it took (perf_counter):
                    MODE dataobj: np.asanyarray(nib.load(PATH).dataobj) (Fortran order)
                    MODE monai:   np.asanyarray(img.dataobj, order="C") (MONAI's
                                  NibabelReader: a C-order copy, as volshard's tensor)
Exits 77 at once when nibabel cannot be imported.
"""
import sys
import time

try:
    import numpy as np
    import nibabel as nib
except ImportError:
    print("skip")
    sys.stdout.flush()
    sys.exit(77)


def make(directory):
    n = 128
    rng = np.random.default_rng(0)
    noisy = rng.uniform(0, 1, (n, n, n)).astype(np.float32)
    nib.save(nib.Nifti1Image(noisy, np.eye(4)), f"{directory}/noisy.nii.gz")
    clean = np.zeros((n, n, n), np.float32)
    i, j, k = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij", sparse=True)
    for _ in range(12):  # like MONAI's create_test_image_3d: constant spheres on zeros
        c = rng.integers(30, n - 30, 3)
        r = rng.integers(5, 30)
        clean[(i - c[0]) ** 2 + (j - c[1]) ** 2 + (k - c[2]) ** 2 <= r * r] = rng.uniform(0.5, 1.0)
    nib.save(nib.Nifti1Image(clean, np.eye(4)), f"{directory}/clean.nii.gz")


def load(path, mode):
    t0 = time.perf_counter()
    img = nib.load(path)
    if mode == "monai":
        a = np.asanyarray(img.dataobj, order="C")
    else:
        a = np.asanyarray(img.dataobj)
    t1 = time.perf_counter()
    assert a.shape == (128, 128, 128)
    return t1 - t0


def main():
    print("ready")
    sys.stdout.flush()
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "make":
            make(parts[1])
            print("ok")
        elif parts[0] == "load":
            print(f"{load(parts[1], parts[2]):.9f}")
        else:
            print("error")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
