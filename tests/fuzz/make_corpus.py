#!/usr/bin/env python3
"""Writes the seed corpus of nifti_fuzzer (tests/fuzz/corpus/): small valid
NIfTI files written by nibabel, covering both versions, both byte orders,
every supported dtype, scaling, 4D, an extension, and gzip (single and
multi-member). Run from the repository root: tests/fuzz/make_corpus.py"""
import gzip
import os

import nibabel as nib
import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(name, img, gz=False, patches=()):
    path = os.path.join(OUT, name)
    tmp = path + ".tmp.nii"
    nib.save(img, tmp)
    with open(tmp, "rb") as f:
        raw = bytearray(f.read())
    os.remove(tmp)
    for offset, value in patches:
        raw[offset:offset + len(value)] = value
    if gz:
        raw = gzip.compress(bytes(raw), compresslevel=1, mtime=0)
    with open(path, "wb") as f:
        f.write(raw)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    aff = np.array([[0, -2, 0, 10], [1.5, 0, 0, -3], [0, 0, 3, 7], [0, 0, 0, 1.0]])
    for dtype in ["uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "float32", "float64"]:
        data = np.arange(2 * 3 * 4).reshape(2, 3, 4, order="F").astype(dtype)
        hdr = nib.Nifti1Header()
        hdr.set_data_dtype(dtype)
        write(f"v1_{dtype}.nii", nib.Nifti1Image(data, aff, header=hdr))
    for endian in "<>":
        hdr = nib.Nifti1Header(endianness=endian)
        hdr.set_data_dtype(np.dtype("int16").newbyteorder(endian))
        img = nib.Nifti1Image(np.arange(24, dtype=np.int16).reshape(2, 3, 4), aff, header=hdr)
        tag = "le" if endian == "<" else "be"
        write(f"v1_int16_{tag}_scaled.nii", img, patches=[(112, np.array([2.5, -3], np.dtype("f4").newbyteorder(endian)).tobytes())])
        hdr2 = nib.Nifti2Header(endianness=endian)
        hdr2.set_data_dtype(np.dtype("float32").newbyteorder(endian))
        img2 = nib.Nifti2Image(np.arange(24, dtype=np.float32).reshape(2, 3, 4), aff, header=hdr2)
        write(f"v2_float32_{tag}.nii", img2)
        write(f"v2_float32_{tag}.nii.gz", img2, gz=True)
    four = np.arange(3 * 2 * 2 * 2, dtype=np.float32).reshape(3, 2, 2, 2)
    four[0, 0, 0, 0] = np.nan
    write("v1_float32_4d.nii.gz", nib.Nifti1Image(four, aff), gz=True)
    q = nib.Nifti1Image(np.arange(8, dtype=np.uint8).reshape(2, 2, 2), None)
    q.header.set_sform(None, code=0)
    q.header.set_qform(aff, code=1)
    write("v1_uint8_qform.nii", q)
    ext = nib.Nifti1Image(np.arange(8, dtype=np.uint8).reshape(2, 2, 2), aff)
    ext.header.extensions.append(nib.nifti1.Nifti1Extension("comment", b"seed"))
    write("v1_uint8_extension.nii", ext)
    # multi-member gzip
    tmp = os.path.join(OUT, "mm.tmp.nii")
    nib.save(nib.Nifti1Image(np.arange(27, dtype=np.int32).reshape(3, 3, 3), aff), tmp)
    raw = open(tmp, "rb").read()
    os.remove(tmp)
    with open(os.path.join(OUT, "v1_int32_multimember.nii.gz"), "wb") as f:
        f.write(gzip.compress(raw[:200], mtime=0) + gzip.compress(raw[200:], mtime=0))


if __name__ == "__main__":
    main()
