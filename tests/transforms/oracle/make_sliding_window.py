#!/usr/bin/env python3
"""The inference fixture (sliding_window.json) from the pinned MONAI:
- "cases": monai.inferers.sliding_window_inference, mode "constant" and
  "gaussian" (sigma_scale one value or per axis), on seeded volumes, some
  smaller than the window along an axis (MONAI pads those symmetrically,
  half before), with a predictor whose output depends on the voxel's place in
  its window, so that padding, window starts and the blending all show;
- "importance_maps": monai.data.utils.compute_importance_map, gaussian;
- "mirrored": nnU-Net v2's test-time mirroring
  (nnUNetPredictor._internal_maybe_mirror_and_predict, written out below)
  around that predictor;
- "largest_component": monai.transforms.KeepLargestConnectedComponent
  (independent, connectivity None) on seeded masks and label maps. It needs
  scikit-image, which the pinned environment lacks: these cases were made
  with it added (numpy 1.26.4, scikit-image 0.24.0) and --check skips them
  without it, saying so.
InferenceTest in train_test.cpp runs volshard's on the same inputs.

    $(scripts/pyenv.sh --path)/bin/python tests/transforms/oracle/make_sliding_window.py [--out FILE]
    $(scripts/pyenv.sh --path)/bin/python tests/transforms/oracle/make_sliding_window.py --check SCRATCH_FILE
"""
import itertools
import json
import os
import sys

import torch
from monai.inferers import sliding_window_inference

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sliding_window.json")

# (image shape X, Y, Z; roi; overlap; sw_batch_size; mode; sigma_scale)
CASES = [
    ((5, 9, 7), (8, 4, 4), 0.5, 3, "constant", 0.125),     # X shorter than the window (odd padding)
    ((12, 10, 3), (6, 6, 6), 0.25, 1, "constant", 0.125),  # Z shorter, MONAI's default-like overlap
    ((7, 7, 7), (4, 4, 4), 0.0, 4, "constant", 0.125),     # no overlap, the last window clamped
    ((5, 9, 7), (8, 4, 4), 0.5, 3, "gaussian", 0.125),     # the same windows, weighted
    ((12, 10, 3), (6, 6, 6), 0.25, 1, "gaussian", (0.2, 0.1, 0.3)),
    ((9, 8, 10), (4, 5, 6), 0.5, 2, "gaussian", 0.125),    # odd and even edges, many overlaps
]
# compute_importance_map(roi, "gaussian", sigma_scale)
MAPS = [((8, 4, 4), 0.125), ((6, 6, 6), (0.2, 0.1, 0.3)), ((7, 5, 3), 0.125), ((96, 96, 96), 0.125)]
# (image shape; mirror axes)
MIRRORED = [((6, 5, 4), (0, 1, 2)), ((6, 5, 4), (2,)), ((6, 5, 4), (0, 2))]
# (shape; classes (1: a mask); fraction of voxels set)
COMPONENTS = [((12, 10, 9), 1, 0.05), ((12, 10, 9), 1, 0.09), ((10, 11, 8), 3, 0.2)]


def predictor(x):
    """2 channels: 2 x the input plus the window-local X index; the local Y index minus Z."""
    n, _, a, b, c = x.shape
    i = torch.arange(a, dtype=x.dtype).view(1, 1, a, 1, 1)
    j = torch.arange(b, dtype=x.dtype).view(1, 1, 1, b, 1)
    k = torch.arange(c, dtype=x.dtype).view(1, 1, 1, 1, c)
    return torch.cat([2 * x + i, (j - k).expand(n, 1, a, b, c)], dim=1)


def nnunet_mirror_and_predict(network, x, mirror_axes):
    """nnUNetPredictor._internal_maybe_mirror_and_predict (nnU-Net v2), as written there."""
    prediction = network(x)
    if mirror_axes is not None:
        mirror_axes = [m + 2 for m in mirror_axes]
        axes_combinations = [c for i in range(len(mirror_axes)) for c in itertools.combinations(mirror_axes, i + 1)]
        for axes in axes_combinations:
            prediction += torch.flip(network(torch.flip(x, axes)), axes)
        prediction /= (len(axes_combinations) + 1)
    return prediction


def floats(t):
    return [float(v) for v in t.flatten().tolist()]


def components():
    """KeepLargestConnectedComponent's cases; each redrawn until its largest components are unique."""
    from monai.transforms import KeepLargestConnectedComponent
    from skimage import measure
    out = []
    gen = torch.Generator().manual_seed(11)
    for shape, classes, fraction in COMPONENTS:
        while True:
            on = torch.rand(shape, generator=gen) < fraction
            labels = torch.where(on, torch.randint(1, classes + 1, shape, generator=gen), 0).to(torch.uint8)
            unique = True
            for c in range(1, classes + 1):
                sizes = sorted(torch.bincount(torch.as_tensor(measure.label((labels == c).numpy(),
                                                                            connectivity=3)).flatten())[1:].tolist())
                unique = unique and (len(sizes) < 2 or sizes[-1] != sizes[-2])
            if unique:
                break
        keep = KeepLargestConnectedComponent(applied_labels=list(range(1, classes + 1)), is_onehot=False,
                                             independent=True, connectivity=None)
        got = keep(labels.clone()[None])[0]  # it changes its input in place
        out.append({"shape": list(shape), "classes": classes, "labels": [int(v) for v in labels.flatten().tolist()],
                    "output": [int(v) for v in torch.as_tensor(got).flatten().tolist()]})
    return out


def make(with_components=True):
    from monai.data.utils import compute_importance_map
    torch.manual_seed(5)
    out = {"monai": __import__("monai").__version__, "torch": torch.__version__, "cases": []}
    for shape, roi, overlap, sw, mode, sigma in CASES:
        image = torch.rand(1, 1, *shape)
        got = sliding_window_inference(image, roi, sw, predictor, overlap=overlap, mode=mode, sigma_scale=sigma)
        sigma3 = list(sigma) if isinstance(sigma, tuple) else [sigma] * 3
        out["cases"].append({"shape": list(shape), "roi": list(roi), "overlap": overlap, "sw_batch_size": sw,
                             "mode": mode, "sigma_scale": sigma3, "image": floats(image), "output": floats(got)})
    out["importance_maps"] = []
    for roi, sigma in MAPS:
        m = compute_importance_map(roi, mode="gaussian", sigma_scale=sigma, device="cpu")
        out["importance_maps"].append({"roi": list(roi),
                                       "sigma_scale": list(sigma) if isinstance(sigma, tuple) else [sigma] * 3,
                                       "map": floats(m) if max(roi) < 50 else None,
                                       "sum": float(m.double().sum()), "min": float(m.min()), "max": float(m.max()),
                                       "centre": float(m[tuple(r // 2 for r in roi)])})
    out["mirrored"] = []
    for shape, axes in MIRRORED:
        image = torch.rand(1, 1, *shape)
        got = nnunet_mirror_and_predict(predictor, image, list(axes))
        out["mirrored"].append({"shape": list(shape), "axes": list(axes), "image": floats(image),
                                "output": floats(got)})
    if with_components:
        out["largest_component"] = components()
    return out


def check(scratch):
    try:
        import skimage  # noqa: F401
        with_components = True
    except ImportError:
        with_components = False
    with open(scratch, "w") as f:
        json.dump(make(with_components), f)
    a, b = json.load(open(HERE)), json.load(open(scratch))
    problems = []
    for n, (ca, cb) in enumerate(zip(a["cases"], b["cases"])):
        if ca["image"] != cb["image"] or ca["roi"] != cb["roi"] or ca["mode"] != cb["mode"]:
            problems.append(f"case {n}: the seeded input differs")
        if max(abs(x - y) for x, y in zip(ca["output"], cb["output"])) > 1e-6:
            problems.append(f"case {n}: MONAI's output differs")
    for n, (ma, mb) in enumerate(zip(a["importance_maps"], b["importance_maps"])):
        if ma != mb:
            problems.append(f"importance map {n}: MONAI's map differs")
    for n, (ma, mb) in enumerate(zip(a["mirrored"], b["mirrored"])):
        if ma["image"] != mb["image"] or max(abs(x - y) for x, y in zip(ma["output"], mb["output"])) > 1e-6:
            problems.append(f"mirrored case {n} differs")
    if with_components and a["largest_component"] != b["largest_component"]:
        problems.append("KeepLargestConnectedComponent's cases differ")
    counts = [len(a["cases"]), len(a["importance_maps"]), len(a["mirrored"]), len(a["largest_component"])]
    if [len(b["cases"]), len(b["importance_maps"]), len(b["mirrored"])] != counts[:3]:
        problems.append("the number of cases differs")
    if problems:
        print("the pinned MONAI no longer makes the committed inference fixture:\n  " + "\n  ".join(problems))
        return 1
    print(f"MONAI {b['monai']} makes the committed inference fixture ({counts[0]} sliding-window cases, "
          f"{counts[1]} importance maps, {counts[2]} mirrored cases"
          + (f", {counts[3]} KeepLargestConnectedComponent cases)" if with_components else
             f"; its {counts[3]} KeepLargestConnectedComponent cases not checked: no scikit-image here)"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    with open(sys.argv[2] if len(sys.argv) == 3 and sys.argv[1] == "--out" else HERE, "w") as f:
        json.dump(make(), f)
        f.write("\n")
