#!/usr/bin/env python3
"""Differential test: volshard's NIfTI reader and writer against nibabel.

Read direction: files written by nibabel (every supported dtype, with and
without scl_slope/scl_inter, little and big endian, 2D/3D/4D, NIfTI-1 and
NIfTI-2, .nii and .nii.gz, sform / qform / neither, header quirks nibabel
fixes on load) are read by `volume_dump read`; values must equal
np.asanyarray(img.dataobj) bit for bit (transposed to C x X x Y x Z), the
dtype must follow volshard's documented mapping, the affine must equal
img.affine exactly.

Write direction: `volume_dump write` writes tensors; nibabel must read the
same values, dtype and shape, and the affine (exact for NIfTI-2, float32-rounded
for NIfTI-1).

Exits 77 (skipped) when nibabel cannot be imported.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import zlib

try:
    import numpy as np
    import nibabel as nib
except ImportError:
    print("SKIP: nibabel/numpy are not importable")
    sys.exit(77)

DTYPES = ["uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "float32", "float64"]
NATURAL = {"uint16": "int32", "uint32": "int64"}


def own_index_values(shape, dtype, rng):
    """Voxels hold their own file-order index (wrapped into the dtype's range);
    floats also get a few special values."""
    n = int(np.prod(shape))
    idx = np.arange(n).reshape(shape, order="F")
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        span = min(int(info.max) - int(info.min) + 1, 2**62)
        vals = (idx % span + int(info.min)) if dt.kind == "i" and span < 2**62 else idx
        # include the extremes of the type
        arr = vals.astype(dt)
        flat = arr.reshape(-1, order="F")
        flat[0] = info.min
        flat[-1] = info.max
        return flat.reshape(shape, order="F")
    arr = (idx.astype(np.float64) * 0.5 - n / 4).astype(dt)
    flat = arr.reshape(-1, order="F")
    extra = rng.standard_normal(min(n, 64)).astype(dt) * 1e3
    flat[: len(extra)] = extra
    if n > 5:
        flat[1] = -0.0
        flat[2] = np.nan
        flat[3] = np.inf
        flat[4] = -np.inf
    return flat.reshape(shape, order="F")


def rotation_affine(rng, flip=False, scale=(1.5, 2.0, 3.0)):
    q = rng.standard_normal(4)
    q /= np.linalg.norm(q)
    w, x, y, z = q
    r = np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])
    s = np.diag(scale)
    if flip:
        s[2, 2] *= -1
    a = np.eye(4)
    a[:3, :3] = r @ s
    a[:3, 3] = rng.uniform(-100, 100, 3)
    return a


class Runner:
    def __init__(self, binary, tmp):
        self.binary = binary
        self.tmp = tmp
        self.failures = []
        self.passed = 0
        self.cases = []
        # One volume_dump process for all cases (LibTorch takes ~1 s to start).
        self.proc = subprocess.Popen([binary, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, *args):
        self.proc.stdin.write("\t".join(args) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("volume_dump serve exited")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()

    def dump(self, path, *flags):
        out = os.path.join(self.tmp, "dump.bin")
        doc = self.call("read", path, out, *flags)
        if "error" in doc:
            return doc, None
        data = np.fromfile(out, dtype=doc["dtype"]).reshape(doc["shape"])
        return doc, data

    def check_read(self, name, path, flags=()):
        self.cases.append(name)
        try:
            img = nib.load(path)
            ref = np.asanyarray(img.dataobj)
            ref_affine = img.affine
        except Exception as e:  # nibabel refuses: we must refuse too
            doc, _ = self.dump(path, *flags)
            if "error" not in doc:
                self.failures.append(f"{name}: nibabel raised {e!r} but volume_dump read it")
            else:
                self.passed += 1
            return
        doc, data = self.dump(path, *flags)
        if data is None:
            self.failures.append(f"{name}: volume_dump failed: {doc.get('error')}")
            return
        if ref.ndim < 3:
            ref = ref.reshape(ref.shape + (1,) * (3 - ref.ndim))
        if ref.ndim == 3:
            ref = ref[..., None]
        ref = ref.reshape(ref.shape[:4])  # trailing singleton dims (5D with dim[5]=1)
        expected = np.moveaxis(ref, 3, 0)  # C, X, Y, Z
        if "--as-float" in flags:
            want_dtype = "float32"
            expected = expected.astype(np.float32)
        else:
            want_dtype = NATURAL.get(expected.dtype.name, expected.dtype.name)
            expected = expected.astype(want_dtype)
        problems = []
        if doc["dtype"] != want_dtype:
            problems.append(f"dtype {doc['dtype']} != {want_dtype}")
        if list(data.shape) != list(expected.shape):
            problems.append(f"shape {list(data.shape)} != {list(expected.shape)}")
        else:
            e = np.ascontiguousarray(expected)
            if e.dtype.kind == "f":
                same = (e == data) | (np.isnan(e) & np.isnan(data))
                same &= np.signbit(e) == np.signbit(data)
                if not same.all():
                    bad = np.argwhere(~same)[0]
                    problems.append(f"value at {tuple(bad)}: {data[tuple(bad)]!r} != {e[tuple(bad)]!r} "
                                    f"({int((~same).sum())} differ)")
                nonfinite = int((~np.isfinite(e)).sum())
                if doc["nonfinite_voxels"] != nonfinite:
                    problems.append(f"nonfinite_voxels {doc['nonfinite_voxels']} != {nonfinite}")
            elif not np.array_equal(e, data):
                bad = np.argwhere(e != data)[0]
                problems.append(f"value at {tuple(bad)}: {data[tuple(bad)]!r} != {e[tuple(bad)]!r}")
        aff = np.array(doc["affine"], dtype=np.float64)
        if not np.array_equal(aff, ref_affine):
            problems.append(f"affine differs by {np.abs(aff - ref_affine).max():.3g}:\n{aff}\nvs nibabel\n{ref_affine}")
        zooms = img.header.get_zooms()
        want_spacing = [float(zooms[i]) if i < len(zooms) and i < len(img.shape) else 1.0 for i in range(3)]
        if doc["spacing_mm"] != want_spacing:
            problems.append(f"spacing {doc['spacing_mm']} != {want_spacing}")
        if problems:
            self.failures.append(f"{name}: " + "; ".join(problems))
        else:
            self.passed += 1

    def check_write(self, name, data_cxyz, affine, suffix, nifti2=False):
        self.cases.append(name)
        raw = os.path.join(self.tmp, "in.bin")
        np.ascontiguousarray(data_cxyz).tofile(raw)
        out = os.path.join(self.tmp, "written" + suffix)
        if os.path.exists(out):
            os.remove(out)
        cmd = ["write", out, raw, data_cxyz.dtype.name, ",".join(map(str, data_cxyz.shape)),
               ",".join(repr(float(v)) for v in affine.reshape(-1))]
        if nifti2:
            cmd.append("--nifti2")
        doc = self.call(*cmd)
        if "error" in doc:
            self.failures.append(f"{name}: write failed: {doc['error']}")
            return
        img = nib.load(out)
        got = np.asanyarray(img.dataobj)
        want = np.moveaxis(data_cxyz, 0, 3)
        if want.shape[3] == 1:
            want = want[..., 0]
        problems = []
        if got.dtype != want.dtype:
            problems.append(f"dtype {got.dtype} != {want.dtype}")
        if got.shape != want.shape:
            problems.append(f"shape {got.shape} != {want.shape}")
        elif not np.array_equal(got, want, equal_nan=True):
            problems.append("values differ")
        want_aff = affine if nifti2 else affine.astype(np.float32).astype(np.float64)
        if not np.array_equal(img.affine, want_aff):
            problems.append(f"affine differs by {np.abs(img.affine - want_aff).max():.3g}")
        if isinstance(img, nib.Nifti2Image) != nifti2:
            problems.append(f"read back as {type(img).__name__}")
        hdr = img.header
        if int(hdr["qform_code"]) != 0:
            if not np.allclose(hdr.get_qform(), affine, atol=1e-4 * max(1, np.abs(affine).max())):
                problems.append(f"qform differs from the affine:\n{hdr.get_qform()}")
        if problems:
            self.failures.append(f"{name}: " + "; ".join(problems))
        else:
            self.passed += 1


def save(img, path, patches=()):
    """nib.save as .nii, then patch header bytes, then gzip if path ends in .gz
    (nibabel's own compresslevel 1), so that the scale factors and other
    fields are exactly what the test wants (nibabel resets some on save)."""
    plain = path[:-3] if path.endswith(".gz") else path
    for p in (plain, path):
        if os.path.exists(p):
            os.remove(p)
    nib.save(img, plain)
    if patches:
        with open(plain, "r+b") as f:
            for offset, value in patches:
                f.seek(offset)
                f.write(value)
    if path.endswith(".gz"):
        with open(plain, "rb") as f:
            raw = f.read()
        os.remove(plain)
        with open(path, "wb") as f:
            f.write(gzip.compress(raw, compresslevel=1))
    return path


def read_cases(r, tmp, rng):
    n = 0
    shapes3 = [(3, 4, 5), (17, 5, 33), (40, 37, 35)]
    for dtype in DTYPES:
        for shape in shapes3:
            for scaling in [None, (2.5, -3.0), (1.0, 0.0), (0.0, 7.0), (-0.5, 0.0), (1.0, 5.0), (float("nan"), 1.0)]:
                if scaling is not None and shape != (17, 5, 33):
                    continue
                for endian in "<>":
                    if endian == ">" and shape == (40, 37, 35):
                        continue
                    for suffix in [".nii", ".nii.gz"]:
                        data = own_index_values(shape, dtype, rng)
                        hdr = nib.Nifti1Header(endianness=endian)
                        hdr.set_data_dtype(np.dtype(dtype).newbyteorder(endian))
                        img = nib.Nifti1Image(data, rotation_affine(rng), header=hdr)
                        patches = []
                        if scaling is not None:
                            patches.append((112, np.array(scaling, np.dtype("f4").newbyteorder(endian)).tobytes()))
                        n += 1
                        path = save(img, os.path.join(tmp, f"r{n}{suffix}"), patches)
                        name = f"read {dtype} {shape} scale={scaling} {endian} {suffix}"
                        r.check_read(name, path)
                        if dtype in ("int16", "uint16", "float64") and suffix == ".nii.gz" and endian == "<":
                            r.check_read(name + " as_float", path, ("--as-float",))
                            r.check_read(name + " file-order", path, ("--file-order",))
    # 4D (channels last), 2D, 5D with dim[5] = 1
    for dtype in ["float32", "int16", "uint8", "float64"]:
        for shape in [(5, 6, 7, 2), (16, 16, 16, 3), (9, 8, 1, 4), (6, 7), (4, 5, 6, 1), (4, 5, 6, 3, 1)]:
            for suffix in [".nii", ".nii.gz"]:
                data = own_index_values(shape, dtype, rng)
                img = nib.Nifti1Image(data, rotation_affine(rng))
                n += 1
                path = save(img, os.path.join(tmp, f"r{n}{suffix}"))
                r.check_read(f"read {dtype} {shape} {suffix}", path)
                r.check_read(f"read {dtype} {shape} {suffix} file-order", path, ("--file-order",))
    # NIfTI-2
    for dtype in DTYPES:
        for endian in "<>":
            for suffix in [".nii", ".nii.gz"]:
                shape = (7, 6, 5, 2) if dtype == "float32" else (7, 6, 5)
                data = own_index_values(shape, dtype, rng)
                hdr = nib.Nifti2Header(endianness=endian)
                hdr.set_data_dtype(np.dtype(dtype).newbyteorder(endian))
                img = nib.Nifti2Image(data, rotation_affine(rng), header=hdr)
                patches = []
                if dtype in ("int16", "float32"):
                    patches.append((176, np.array([0.25, 10.0], np.dtype("f8").newbyteorder(endian)).tobytes()))
                n += 1
                path = save(img, os.path.join(tmp, f"r{n}{suffix}"), patches)
                r.check_read(f"read NIfTI-2 {dtype} {endian} {suffix}", path)
                hdr2 = nib.Nifti2Header(endianness=endian)
                hdr2.set_data_dtype(np.dtype(dtype).newbyteorder(endian))
                img = nib.Nifti2Image(data, None, header=hdr2)
                img.header.set_qform(rotation_affine(rng, flip=True), code=1)
                img.header.set_sform(None, code=0)
                n += 1
                path = save(img, os.path.join(tmp, f"r{n}{suffix}"))
                r.check_read(f"read NIfTI-2 qform-only {dtype} {endian} {suffix}", path)
    # transforms: sform only, qform only (qfac +1 and -1), neither, both, bad codes, pixdim fixes
    for k in range(12):
        for suffix in [".nii", ".nii.gz"]:
            data = own_index_values((6, 5, 4), "float32", rng)
            img = nib.Nifti1Image(data, None)
            a = rotation_affine(rng, flip=bool(k % 2), scale=tuple(rng.uniform(0.3, 4, 3)))
            kind = ["sform", "qform", "neither", "both"][k % 4]
            if kind in ("sform", "both"):
                img.header.set_sform(a, code=int(rng.integers(1, 6)))
            else:
                img.header.set_sform(None, code=0)
            if kind in ("qform", "both"):
                img.header.set_qform(rotation_affine(rng, flip=bool(k % 3 == 0)), code=int(rng.integers(1, 6)))
            else:
                img.header.set_qform(None, code=0)
            if kind == "neither":
                img.header.set_zooms(tuple(rng.uniform(0.5, 3, 3)))
            n += 1
            path = save(img, os.path.join(tmp, f"r{n}{suffix}"))
            r.check_read(f"read affine {kind} #{k} {suffix}", path)
    # header quirks nibabel fixes on load (uncompressed, patched in place)
    quirks = [
        ("qform_code=7 (invalid -> 0)", 252, np.array([7], "<i2")),
        ("sform_code=-1 (invalid -> 0)", 254, np.array([-1], "<i2")),
        ("pixdim[0]=0 (qfac -> 1)", 76, np.array([0], "<f4")),
        ("pixdim[1]=0 (-> 1)", 80, np.array([0], "<f4")),
        ("pixdim[2]=-2.5 (-> 2.5)", 84, np.array([-2.5], "<f4")),
        ("quatern b,c,d slightly over unit norm", 256, np.array([0.6, 0.8, 1e-4], "<f4")),
        ("quatern b,c,d far over unit norm", 256, np.array([0.9, 0.9, 0.0], "<f4")),
        ("scl_slope=inf", 112, np.array([np.inf], "<f4")),
        ("bitpix wrong", 72, np.array([3], "<i2")),
    ]
    for label, offset, value in quirks:
        for kind in ["qform", "neither"]:
            data = own_index_values((5, 4, 3), "int16", rng)
            img = nib.Nifti1Image(data, None)
            img.header.set_sform(None, code=0)
            if kind == "qform":
                img.header.set_qform(rotation_affine(rng), code=1)
            else:
                img.header.set_qform(None, code=0)
            n += 1
            path = save(img, os.path.join(tmp, f"r{n}.nii"), [(offset, value.tobytes())])
            r.check_read(f"read quirk {label} with {kind}", path)
    # extensions (vox_offset > 352)
    data = own_index_values((5, 6, 7), "int32", rng)
    img = nib.Nifti1Image(data, rotation_affine(rng))
    img.header.extensions.append(nib.nifti1.Nifti1Extension("comment", b"volshard test extension" * 3))
    for suffix in [".nii", ".nii.gz"]:
        n += 1
        path = save(img, os.path.join(tmp, f"r{n}{suffix}"))
        r.check_read(f"read with an extension {suffix}", path)
    # multi-member gzip: header + half the data, then the rest
    data = own_index_values((16, 9, 8), "float32", rng)
    img = nib.Nifti1Image(data, rotation_affine(rng))
    n += 1
    plain = save(img, os.path.join(tmp, f"r{n}.nii"))
    raw = open(plain, "rb").read()
    os.remove(plain)
    mm = os.path.join(tmp, f"r{n}_multi.nii.gz")
    with open(mm, "wb") as f:
        f.write(gzip.compress(raw[:1000], compresslevel=1))
        f.write(gzip.compress(raw[1000:], compresslevel=6))
    r.check_read("read multi-member gzip", mm)
    # trailing bytes after the voxels inside the gzip stream (ISIZE > needed)
    tb = os.path.join(tmp, f"r{n}_trailing.nii.gz")
    with open(tb, "wb") as f:
        f.write(gzip.compress(raw + b"\0" * 4096, compresslevel=1))
    r.check_read("read gzip with trailing bytes after the voxels", tb)
    # zlib-style raw deflate would not be gzip: skip. Large-ish noisy volume.
    data = rng.uniform(0, 1, (64, 48, 40)).astype(np.float32)
    n += 1
    r.check_read("read noisy 64x48x40 .nii.gz", save(nib.Nifti1Image(data, rotation_affine(rng)), os.path.join(tmp, f"r{n}.nii.gz")))


def write_cases(r, tmp, rng):
    shear = np.array([[1.2, 0.3, 0.0, 5.0], [0.0, 0.9, 0.1, -7.0], [0.05, 0.0, 2.1, 3.0], [0, 0, 0, 1.0]])
    for dtype in ["uint8", "int8", "int16", "int32", "int64", "float32", "float64"]:
        for shape in [(1, 6, 5, 4), (3, 17, 5, 9), (2, 16, 16, 16)]:
            for suffix in [".nii", ".nii.gz"]:
                for nifti2 in [False, True]:
                    data = own_index_values(shape, dtype, rng)
                    for affine_name, affine in [("rotation", rotation_affine(rng)),
                                                ("flip", rotation_affine(rng, flip=True)),
                                                ("shear", shear)]:
                        if affine_name != "rotation" and (shape[0] != 3 or dtype != "float32"):
                            continue
                        r.check_write(f"write {dtype} {shape} {suffix} {'nifti2' if nifti2 else 'nifti1'} {affine_name}",
                                      data, affine, suffix, nifti2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--keep", action="store_true", help="keep the temporary files")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    nib.imageglobals.logger.setLevel(40)  # the header fixes nibabel logs are expected here
    tmp = tempfile.mkdtemp(prefix="volshard_nibabel_")
    r = Runner(args.binary, tmp)
    read_cases(r, tmp, rng)
    write_cases(r, tmp, rng)
    r.close()
    if not args.keep:
        for f in os.listdir(tmp):
            os.remove(os.path.join(tmp, f))
        os.rmdir(tmp)
    print(f"nibabel {nib.__version__}: {r.passed} of {len(r.cases)} cases equal")
    for f in r.failures[:40]:
        print("FAIL", f)
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
