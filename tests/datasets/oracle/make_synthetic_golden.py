#!/usr/bin/env python3
"""Writes synthetic_golden.json: MONAI's create_test_image_3d, run by numpy.

Run with Debian's python3-numpy (numpy 1.24):
    $(scripts/pyenv.sh --path)/bin/python tests/datasets/oracle/make_synthetic_golden.py > tests/datasets/oracle/synthetic_golden.json

MONAI is not packaged for Debian, so create_test_image_3d and rescale_array are
copied below from MONAI 1.4.0 (monai/data/synthetic.py, monai/transforms/utils.py),
statement for statement, with np.random.RandomState as the generator. The only
addition is the `objects` log of what each iteration drew. Volumes are pinned
by the sha256 of their little-endian C-order bytes (image float32, label int32)
plus a few voxels, so the file stays small.
"""
import hashlib
import json
import sys

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
STREAM_SHARED = 1
SYNTH_PURPOSE = 0x53594E5448  # "SYNTH": volshard::kSyntheticSeedPurpose


def rescale_array(arr, minv=0.0, maxv=1.0, dtype=np.float32):
    """monai/transforms/utils.py rescale_array, numpy branch."""
    if dtype is not None:
        arr = arr.astype(dtype)  # convert_data_type(arr, dtype=dtype)
    mina = arr.min()
    maxa = arr.max()
    if mina == maxa:
        return arr * minv if minv is not None else arr
    norm = (arr - mina) / (maxa - mina)  # normalize the array first
    if (minv is None) or (maxv is None):
        return norm
    return (norm * (maxv - minv)) + minv


def create_test_image_3d(height, width, depth, num_objs=12, rad_max=30, rad_min=5, noise_max=0.0,
                         num_seg_classes=5, random_state=None, objects=None):
    """monai/data/synthetic.py create_test_image_3d (channel_dim=None)."""
    if rad_max <= rad_min:
        raise ValueError(f"`rad_min` {rad_min} should be less than `rad_max` {rad_max}.")
    if rad_min < 1:
        raise ValueError(f"`rad_min` {rad_min} should be no less than 1.")
    min_size = min(height, width, depth)
    if min_size <= 2 * rad_max:
        raise ValueError(f"the minimal size {min_size} of the image should be larger than `2 * rad_max` 2x{rad_max}.")

    image = np.zeros((height, width, depth))
    rs = np.random.random.__self__ if random_state is None else random_state

    for _ in range(num_objs):
        x = rs.randint(rad_max, height - rad_max)
        y = rs.randint(rad_max, width - rad_max)
        z = rs.randint(rad_max, depth - rad_max)
        rad = rs.randint(rad_min, rad_max)
        spy, spx, spz = np.ogrid[-x : height - x, -y : width - y, -z : depth - z]
        circle = (spx * spx + spy * spy + spz * spz) <= rad * rad

        if num_seg_classes > 1:
            value = np.ceil(rs.random() * num_seg_classes)
        else:
            value = rs.random() * 0.5 + 0.5
        image[circle] = value
        if objects is not None:
            objects.append([int(x), int(y), int(z), int(rad), float(value)])

    labels = np.ceil(image).astype(np.int32, copy=False)

    norm = rs.uniform(0, num_seg_classes * noise_max, size=image.shape)
    noisyimage = rescale_array(np.maximum(image, norm))
    return noisyimage, labels


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def derive_seed(base, stream, epoch, ident):
    """volshard::derive_seed (sampler/include/volshard/sampler/seed_streams.h)."""
    h = mix64((base + GOLDEN_GAMMA) & MASK64)
    h = mix64(((h ^ stream) + GOLDEN_GAMMA) & MASK64)
    h = mix64(((h ^ epoch) + GOLDEN_GAMMA) & MASK64)
    return mix64(((h ^ ident) + GOLDEN_GAMMA) & MASK64)


def synthetic_volume_seed(seed, index):
    """volshard::synthetic_volume_seed: the numpy seed of volume `index`."""
    return derive_seed(seed & MASK64, STREAM_SHARED, 0, (SYNTH_PURPOSE + index) & MASK64) & 0xFFFFFFFF


def sha256(arr, dtype):
    return hashlib.sha256(np.ascontiguousarray(arr, dtype=dtype).tobytes()).hexdigest()


def describe(img, seg, objects, params):
    """Hashes and a few facts of one volume (img float32, seg int32, shape (h, w, d))."""
    assert img.dtype == np.float32 and seg.dtype == np.int32
    h, w, d = img.shape
    points = {(0, 0, 0), (h - 1, w - 1, d - 1), (h // 2, w // 3, d // 4), (h // 3, w // 2, d - 2)}
    for x, y, z, rad, _ in objects[:1] + objects[-1:]:
        points |= {(x, y, z), (x + rad, y, z), (x, y + rad - 1, z), (x, y, z - rad - 1 if z - rad - 1 >= 0 else 0)}
    voxels = [[i, j, k, float(img[i, j, k]), int(seg[i, j, k])] for i, j, k in sorted(points)]
    return {
        "params": params,
        "shape": [h, w, d],
        "image_sha256": sha256(img, "<f4"),
        "label_sha256": sha256(seg, "<i4"),
        "image_min": float(img.min()),
        "image_max": float(img.max()),
        "image_distinct": int(np.unique(img).size),
        "label_max": int(seg.max()),
        "foreground": int((seg > 0).sum()),
        "objects": objects,
        "voxels": voxels,
    }


def run(params, rs):
    objects = []
    img, seg = create_test_image_3d(**params, random_state=rs, objects=objects)
    return describe(img, seg, objects, params)


def small(**kw):
    p = {"height": 40, "width": 36, "depth": 44, "num_objs": 12, "rad_max": 10, "rad_min": 4,
         "noise_max": 0.0, "num_seg_classes": 1}
    p.update(kw)
    return p


def primitives():
    """Raw RandomState draws: randint (incl. rng == 0 and 64-bit ranges), random, uniform."""
    out = {}
    rs = np.random.RandomState(12345)
    pairs = [[0, 1], [5, 6], [0, 2], [0, 3], [4, 10], [30, 98], [-7, 9], [0, 2**31], [0, 2**32 - 1],
             [0, 2**32], [0, 2**32 + 1], [-(2**40), 2**41 + 3], [0, 2**63 - 1], [-(2**63), 2**63 - 1], [3, 4]]
    out["randint"] = [[lo, hi, int(rs.randint(lo, hi))] for lo, hi in pairs]
    out["random_after_randint"] = [float(rs.random()) for _ in range(4)]
    out["uniform"] = [[lo, hi, float(rs.uniform(lo, hi))] for lo, hi in [[0.0, 1.0], [-3.0, 7.5], [2.0, -1.0], [0.0, 0.0]]]
    block = rs.uniform(0.0, 0.6, size=1001)
    out["uniform_fill"] = {"lo": 0.0, "hi": 0.6, "count": 1001, "sha256": sha256(block, "<f8"),
                           "first": float(block[0]), "last": float(block[-1])}
    out["random_after_fill"] = float(rs.random())
    # randint(lo, lo + 1) draws nothing: the next random() is a fresh generator's first.
    a = np.random.RandomState(99)
    a.randint(5, 6)
    out["rng0_then_random_seed99"] = float(a.random())
    out["fresh_random_seed99"] = float(np.random.RandomState(99).random())
    out["seed"] = 12345
    return out


def main():
    golden = {"numpy": np.__version__, "primitives": primitives(), "cases": []}
    cases = golden["cases"]

    # One running RandomState(0): volume 1 continues volume 0's stream (noise draws included).
    rs = np.random.RandomState(0)
    for k in range(2):
        c = run(small(), rs)
        c.update(name=f"running_seed0_vol{k}", seed=0, running_index=k)
        cases.append(c)
    rs = np.random.RandomState(0)
    for k in range(2):
        c = run(small(noise_max=0.2, num_seg_classes=3), rs)
        c.update(name=f"running_seed0_noise_classes3_vol{k}", seed=0, running_index=k)
        cases.append(c)
    for seed, params in [
        (1, small(num_seg_classes=3)),
        (2, small(noise_max=0.2)),
        (3, small(noise_max=0.2, num_seg_classes=3)),
        (2**32 - 1, small(num_objs=30, rad_min=1, rad_max=4)),
        (7, {"height": 5, "width": 6, "depth": 7, "num_objs": 4, "rad_max": 2, "rad_min": 1,
             "noise_max": 0.0, "num_seg_classes": 1}),  # randint(2, 3) and randint(1, 2): rng == 0
        (8, small(num_objs=0)),  # constant image: rescale_array returns x * 0
        (9, small(num_objs=3, noise_max=0.5, num_seg_classes=5)),
    ]:
        c = run(params, np.random.RandomState(seed))
        c.update(name=f"seed{seed}", seed=seed, running_index=0)
        cases.append(c)

    # The MONAI tutorial: np.random.seed(0) once, then 128^3 volumes with num_seg_classes=1.
    rs = np.random.RandomState(0)
    for k in range(2):
        c = run({"height": 128, "width": 128, "depth": 128, "num_objs": 12, "rad_max": 30, "rad_min": 5,
                 "noise_max": 0.0, "num_seg_classes": 1}, rs)
        c.update(name=f"tutorial_vol{k}", seed=0, running_index=k)
        cases.append(c)

    # MONAI's tests/test_synthetic.py 3D case: set_determinism(seed=0) -> np.random.seed(0).
    for seed in (0, 42):
        objects = []
        img, seg = create_test_image_3d(64, 64, 45, num_seg_classes=3, rad_max=10, rad_min=4,
                                        random_state=np.random.RandomState(seed), objects=objects)
        print(f"test_synthetic 3D, seed {seed}: img.mean {img.mean():.9g} seg.mean {seg.mean():.9g}"
              f" (MONAI expects 0.025132, 0.0753961)", file=sys.stderr)
    objects = []
    img, seg = create_test_image_3d(64, 64, 45, num_seg_classes=3, rad_max=10, rad_min=4,
                                    random_state=np.random.RandomState(0), objects=objects)
    c = describe(img, seg, objects, {"height": 64, "width": 64, "depth": 45, "num_objs": 12, "rad_max": 10,
                                     "rad_min": 4, "noise_max": 0.0, "num_seg_classes": 3})
    c.update(name="monai_test_synthetic_3d", seed=0, running_index=0,
             image_mean=float(img.astype(np.float64).mean()), label_mean=float(seg.astype(np.float64).mean()))
    cases.append(c)

    # volshard's make_volumes rule: volume i from RandomState(synthetic_volume_seed(seed, i)).
    mv = {"seed": 7, "first": 3, "count": 3, "params": small(num_seg_classes=3, noise_max=0.1), "volumes": []}
    for i in range(mv["first"], mv["first"] + mv["count"]):
        s = synthetic_volume_seed(mv["seed"], i)
        d = run(mv["params"], np.random.RandomState(s))
        mv["volumes"].append({"index": i, "numpy_seed": s, "image_sha256": d["image_sha256"],
                              "label_sha256": d["label_sha256"]})
    golden["make_volumes"] = mv

    json.dump(golden, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
