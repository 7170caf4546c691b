#!/usr/bin/env python3
"""Goldens of MONAI 1.4.0's deterministic CT/MRI transforms, and of its random intensity and
spatial augmentations given their draws (RandGaussianNoise, RandGaussianSmooth, RandAdjustContrast,
RandBiasField, RandAffine, Rand3DElastic, and both about a crop's centre), for volshard's tests.

Runs MONAI's own transforms (the pinned environment's MONAI 1.4.0 from PyPI,
scripts/requirements.txt) on small inputs with LPS, oblique and permuted affines, anisotropic spacing and
odd sizes, and writes each case's input and output as raw little-endian
float32 in C order (channel-first) plus one manifest.json with the shapes,
affines and parameters. Rerun when a case is added:

    $(scripts/pyenv.sh --path)/bin/python tests/transforms/oracle/make_monai_goldens.py [--out DIR]

`make test` runs it into the build tree and checks that MONAI still writes
the committed goldens (tests/transforms/oracle/compare_goldens.py).
"""
import json
import os
import sys

import numpy as np
import torch

import monai  # noqa: E402
from monai.data import MetaTensor  # noqa: E402
from monai.transforms import (  # noqa: E402
    ConvertToMultiChannelBasedOnBratsClasses,
    CropForeground,
    SpatialPad,
    NormalizeIntensity,
    Orientation,
    Affine,
    Rand3DElastic,
    RandAdjustContrast,
    RandAffine,
    RandBiasField,
    RandGaussianNoise,
    RandGaussianSmooth,
    ScaleIntensityRange,
    Spacing,
)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "monai_goldens")
if len(sys.argv) == 3 and sys.argv[1] == "--out":
    OUT = sys.argv[2]


def rotation(axis, degrees):
    c, s = np.cos(np.radians(degrees)), np.sin(np.radians(degrees))
    r = np.eye(3)
    i, j = [(1, 2), (0, 2), (0, 1)][axis]
    r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


def affine(spacing, origin, rot=np.eye(3), flips=(1, 1, 1), perm=(0, 1, 2)):
    m = np.zeros((4, 4))
    axes = np.eye(3)[:, list(perm)] * np.array(flips)
    m[:3, :3] = rot @ axes @ np.diag(spacing)
    m[:3, 3] = origin
    m[3, 3] = 1
    return m


def volume(rng, channels, shape, kind):
    if kind == "ct":  # HU-like: air, soft tissue, a bright organ
        x = rng.normal(40, 30, (channels, *shape))
        x[:, : shape[0] // 3] = -1000
        c = [s // 2 for s in shape]
        zz = np.indices(shape)
        organ = sum(((zz[k] - c[k]) / max(s / 4, 1)) ** 2 for k, s in enumerate(shape)) < 1
        x[:, organ] = 150
        return x.astype(np.float32)
    if kind == "label4":  # BraTS labels 0..3 (MONAI's convention uses 1, 2, 3)
        return rng.integers(0, 4, (channels, *shape)).astype(np.float32)
    x = rng.gamma(2.0, 50.0, (channels, *shape)).astype(np.float32)
    x[:, :2] = 0  # a zero background slab for nonzero normalisation
    return x


cases = []


def save(name, array):
    path = os.path.join(OUT, name + ".f32")
    np.ascontiguousarray(np.asarray(array, dtype="<f4")).tofile(path)
    return os.path.basename(path)


def add(name, transform, params, x, aff, out, **arrays):
    """One case; `arrays` are more inputs (name=array), saved as <case>.<name>.f32 with <name>_shape."""
    entry = {
        "name": name,
        "transform": transform,
        "params": params,
        "input": save(name + ".in", x),
        "input_shape": list(x.shape),
        "input_affine": np.asarray(aff, dtype=float).tolist(),
        "output": save(name + ".out", out.numpy() if hasattr(out, "numpy") else out),
        "output_shape": list(out.shape),
    }
    if isinstance(out, MetaTensor):
        entry["output_affine"] = out.affine.numpy().astype(float).tolist()
    for key, array in arrays.items():
        array = array.numpy() if hasattr(array, "numpy") else np.asarray(array)
        entry[key] = save(f"{name}.{key}", array)
        entry[key + "_shape"] = list(array.shape)
    cases.append(entry)


class Replay:
    """The numpy RandomState calls MONAI's random intensity transforms make, answered from given
    draws: rand() is the coin, uniform(low, high) numpy's low + (high - low) * u, normal(loc, scale,
    size) numpy's loc + scale * z in float64. volshard draws its own u and z from the sample's stream;
    these goldens check what MONAI computes from them."""

    def __init__(self, uniforms, z=None):
        self.uniforms, self.z, self.drawn = list(uniforms), z, []

    def rand(self):
        return 0.0  # below any prob > 0: applied

    def uniform(self, low=0.0, high=1.0, size=None):
        if size is not None:  # RandBiasField's coefficients: an array, each low + (high - low) * u
            values = [low + (high - low) * self.uniforms.pop(0) for _ in range(size)]
            self.drawn.extend(values)
            return np.array(values)
        value = low + (high - low) * self.uniforms.pop(0)
        self.drawn.append(value)
        return value

    def normal(self, loc=0.0, scale=1.0, size=None):
        assert tuple(size) == self.z.shape, (size, self.z.shape)
        return loc + scale * self.z.astype(np.float64)


def random_intensity_cases(rng):
    """RandGaussianNoise, RandGaussianSmooth and RandAdjustContrast (MONAI 1.4 defaults unless
    named) with their draws given: the drawn values and the uniforms behind them go in params."""
    one = volume(rng, 1, (9, 7, 5), "ct")
    four = volume(rng, 4, (8, 6, 5), "mri")
    for name, x, mean, std, sample_std, u in (("std_0.1", one, 0.0, 0.1, True, 0.37),
                                              ("mean_0.5_std_2_four_channels", four, 0.5, 2.0, True, 0.81),
                                              ("fixed_std_0.3", one, 0.0, 0.3, False, None)):
        z = rng.standard_normal(x.shape).astype(np.float32)  # float32 values, exact in float64
        t = RandGaussianNoise(prob=1.0, mean=mean, std=std, sample_std=sample_std)
        t.R = Replay([] if u is None else [u], z)
        out = t(torch.from_numpy(x))
        drawn = t.R.drawn[0] if t.R.drawn else std
        add(f"rand_gaussian_noise_{name}", "RandGaussianNoise",
            {"mean": mean, "std": std, "sample_std": sample_std, "u": u, "drawn_std": drawn}, x, np.eye(4), out)
        cases[-1]["noise"] = save(f"rand_gaussian_noise_{name}.noise", z)
    for name, x, ranges, u in (("default_ranges", one, [(0.25, 1.5)] * 3, [0.1, 0.5, 0.9]),
                               # a kernel longer than its axis (17 to 25 taps over 6), sigma 0 (one tap of 1)
                               ("small_large_zero_four_channels", four, [(0.1, 0.2), (2.0, 3.0), (0.0, 0.0)],
                                [0.3, 0.6, 0.5])):
        t = RandGaussianSmooth(sigma_x=ranges[0], sigma_y=ranges[1], sigma_z=ranges[2], prob=1.0)
        t.R = Replay(u)
        out = t(torch.from_numpy(x))
        add(f"rand_gaussian_smooth_{name}", "RandGaussianSmooth",
            {"sigma": [list(r) for r in ranges], "u": u, "drawn_sigma": [t.x, t.y, t.z]}, x, np.eye(4), out)
    constant = np.full((1, 4, 3, 2), 7.5, np.float32)
    for name, x, gamma, invert, retain, u in (("default_range", one, (0.5, 4.5), False, False, 0.3),
                                              ("below_one_four_channels", four, (0.5, 1.0), False, False, 0.2),
                                              ("invert_image", one, (0.5, 4.5), True, False, 0.6),
                                              ("retain_stats", four, (0.5, 4.5), False, True, 0.45),
                                              ("invert_and_retain", one, (0.5, 4.5), True, True, 0.1),
                                              ("constant_image", constant, (0.5, 4.5), False, False, 0.5)):
        t = RandAdjustContrast(prob=1.0, gamma=gamma, invert_image=invert, retain_stats=retain)
        t.R = Replay([u])
        out = t(torch.from_numpy(x))
        add(f"rand_adjust_contrast_{name}", "RandAdjustContrast",
            {"gamma": list(gamma), "invert_image": invert, "retain_stats": retain, "u": u,
             "drawn_gamma": t.gamma_value}, x, np.eye(4), out)


def random_bias_field_cases(rng):
    """RandBiasField (MONAI 1.4, prob=1) given its coefficients: MONAI's default degree 3 and range
    on one channel, degree 2 and a range below zero on four channels, degree 5, and an axis of one
    voxel (numpy's linspace gives it -1 alone)."""
    one = volume(rng, 1, (9, 7, 5), "mri")
    four = volume(rng, 4, (8, 6, 5), "mri")
    thin = volume(rng, 1, (6, 1, 4), "mri")
    for name, x, degree, coeff in (("default", one, 3, (0.0, 0.1)),
                                   ("degree_2_negative_four_channels", four, 2, (-0.3, 0.2)),
                                   ("degree_5", one, 5, (0.0, 0.1)),
                                   ("one_voxel_axis", thin, 3, (-0.1, 0.1))):
        u = rng.random((degree + 1) * (degree + 2) * (degree + 3) // 6).tolist()
        t = RandBiasField(degree=degree, coeff_range=coeff, prob=1.0)
        t.R = Replay(u)
        out = t(torch.from_numpy(x))
        add(f"rand_bias_field_{name}", "RandBiasField",
            {"degree": degree, "coeff_range": list(coeff), "u": u, "drawn_coeff": list(t._coeff)}, x, np.eye(4), out)


def random_affine_cases(rng):
    """RandAffine (MONAI 1.4 with prob=1) given its 15 draws (rotate x, y, z; shear 0-5; translate
    x, y, z; scale x, y, z), bilinear on images and nearest on labels, for each padding mode, on the
    whole volume; and about a crop: MONAI's Affine with RandAffine's matrix moved to the crop's
    centre (a translation by start + (size - 1) / 2 - (L - 1) / 2 before it) and the crop's
    spatial_size, so the crop's grid reads the whole volume around it, as volshard samples it.
    RandZoom as volshard does it (the zoom z as a scale 1 / z in front of the matrix) about a crop."""
    image = volume(rng, 1, (11, 9, 7), "ct")
    label = rng.integers(0, 4, (1, 11, 9, 7)).astype(np.float32)
    four = volume(rng, 4, (10, 8, 7), "mri")
    ranges = dict(rotate_range=(0.5, 0.3, 0.2), shear_range=(0.1, 0.05, 0.0, 0.1, 0.05, 0.02),
                  translate_range=(2.0, 1.5, 1.0), scale_range=(0.2, 0.1, 0.15))

    def rand_affine(x, mode, padding, u):
        t = RandAffine(prob=1.0, mode=mode, padding_mode=padding, **ranges)
        t.R = Replay([])
        # MONAI 1.4's RandAffine.__call__ draws the grid's parameters twice (its randomize(), then
        # rand_affine_grid(randomize=True)) and uses the second: both replay the same 15 draws.
        t.rand_affine_grid.R = Replay(u + u)
        out = t(torch.from_numpy(x))
        g = t.rand_affine_grid
        assert len(g.R.drawn) == 30 and g.R.drawn[:15] == g.R.drawn[15:], g.R.drawn
        drawn = {"rotate": list(g.rotate_params), "shear": list(g.shear_params),
                 "translate": list(g.translate_params), "scale": list(g.scale_params)}
        return out, drawn, g.get_transformation_matrix().numpy().astype(np.float64)

    for padding in ("zeros", "border", "reflection"):
        u = rng.random(15).tolist()
        for kind, x, mode in (("image", image, "bilinear"), ("label", label, "nearest")):
            out, drawn, _ = rand_affine(x, mode, padding, u)
            add(f"rand_affine_{kind}_{padding}", "RandAffine",
                {"mode": mode, "padding_mode": padding, "u": u, **drawn, "crop_start": None}, x, np.eye(4), out)
    # About a crop: inside the volume, against its upper corner with a long translation (the
    # padding reads past the edge), four channels; then a zoom alone and a zoom with the affine.
    for name, x, kind, start, size, padding, zoom, affine_on in (
            ("inside", image, "image", (3, 2, 1), (6, 5, 4), "zeros", None, True),
            ("inside", label, "label", (3, 2, 1), (6, 5, 4), "zeros", None, True),
            ("corner", image, "image", (5, 4, 3), (6, 5, 4), "border", None, True),
            ("corner", label, "label", (5, 4, 3), (6, 5, 4), "reflection", None, True),
            ("four_channels", four, "image", (1, 2, 0), (7, 5, 6), "reflection", None, True),
            ("zoom_1.3", image, "image", (2, 2, 1), (7, 5, 5), "zeros", 1.3, False),
            ("zoom_0.8_and_affine", image, "image", (2, 2, 1), (7, 5, 5), "border", 0.8, True)):
        u = rng.random(15).tolist()
        mode = "bilinear" if kind == "image" else "nearest"
        _, drawn, m = rand_affine(x, mode, padding, u)
        if not affine_on:
            m, drawn = np.eye(4), {}
        if zoom is not None:
            m = np.diag([1 / zoom] * 3 + [1.0]) @ m
        shift = np.eye(4)
        shape = np.array(x.shape[1:], dtype=np.float64)
        shift[:3, 3] = np.array(start) + (np.array(size) - 1) / 2 - (shape - 1) / 2
        out = Affine(affine=shift @ m, spatial_size=size, mode=mode, padding_mode=padding, image_only=True)(
            torch.from_numpy(x))
        add(f"rand_affine_about_crop_{name}_{kind}", "RandAffine",
            {"mode": mode, "padding_mode": padding, "u": u if affine_on else None, **drawn,
             "crop_start": list(start), "crop_size": list(size), "zoom": zoom}, x, np.eye(4), out)


class ElasticReplay(Replay):
    """Rand3DElastic's own draws: the coin, its offset field (numpy's uniform(-1, 1, size)), then
    magnitude and sigma from the given uniforms."""

    def __init__(self, field, uniforms):
        super().__init__(uniforms)
        self.field = field

    def uniform(self, low=0.0, high=1.0, size=None):
        if size is not None:
            assert (low, high) == (-1.0, 1.0) and tuple(size) == self.field.shape, (low, high, size)
            return self.field
        return super().uniform(low, high)


def random_elastic_cases(rng):
    """Rand3DElastic (MONAI 1.4 with prob=1) given its draws: the offset field (3 x the output's
    shape, uniform in [-1, 1), float32: volshard makes it from a key in the sample's stream), the
    magnitude and sigma, and the affine's 15 draws, bilinear on images and nearest on labels, for
    each padding mode, on the whole volume; and about a crop: Rand3DElastic's own steps (create_grid,
    GaussianFilter(3, sigma, 3.0) of the field times the magnitude added to the grid, the affine,
    Resample) with the matrix moved to the crop's centre as the RandAffine cases move it. Each case
    also keeps MONAI's smoothed, scaled offsets (`offsets`)."""
    from monai.networks.layers import GaussianFilter
    from monai.transforms import Resample
    from monai.transforms.utils import create_grid

    image = volume(rng, 1, (11, 9, 7), "ct")
    label = rng.integers(0, 4, (1, 11, 9, 7)).astype(np.float32)
    four = volume(rng, 4, (10, 8, 7), "mri")
    ranges = dict(rotate_range=(0.4, 0.2, 0.3), shear_range=(0.05, 0.0, 0.1, 0.0, 0.05, 0.02),
                  translate_range=(1.5, 1.0, 0.5), scale_range=(0.15, 0.1, 0.2))
    sigma_range, magnitude_range = (1.0, 2.5), (5.0, 15.0)

    def offsets_of(field, sigma, magnitude):
        return GaussianFilter(3, sigma, 3.0)(torch.from_numpy(field).unsqueeze(0))[0] * magnitude

    for padding in ("zeros", "border", "reflection"):
        field = rng.uniform(-1.0, 1.0, (3, 11, 9, 7)).astype(np.float32)
        u_elastic, u = rng.random(2).tolist(), rng.random(15).tolist()
        for kind, x, mode in (("image", image, "bilinear"), ("label", label, "nearest")):
            t = Rand3DElastic(sigma_range=sigma_range, magnitude_range=magnitude_range, prob=1.0, mode=mode,
                              padding_mode=padding, **ranges)
            t.R = ElasticReplay(field, u_elastic)
            t.rand_affine_grid.R = Replay(u + u)  # randomize(), then the grid's own draws at the call
            out = t(torch.from_numpy(x))
            g = t.rand_affine_grid
            assert len(g.R.drawn) == 30 and g.R.drawn[:15] == g.R.drawn[15:], g.R.drawn
            params = {"mode": mode, "padding_mode": padding, "u": u_elastic + u, "magnitude": t.magnitude,
                      "sigma": t.sigma, "rotate": list(g.rotate_params), "shear": list(g.shear_params),
                      "translate": list(g.translate_params), "scale": list(g.scale_params), "crop_start": None}
            add(f"rand_3d_elastic_{kind}_{padding}", "Rand3DElastic", params, x, np.eye(4), out, field=field,
                offsets=offsets_of(field, t.sigma, t.magnitude))
    for name, x, kind, start, size, padding in (
            ("inside", image, "image", (3, 2, 1), (6, 5, 4), "zeros"),
            ("inside", label, "label", (3, 2, 1), (6, 5, 4), "zeros"),
            ("corner", image, "image", (5, 4, 3), (6, 5, 4), "border"),
            ("four_channels", four, "image", (1, 2, 0), (7, 5, 6), "reflection")):
        field = rng.uniform(-1.0, 1.0, (3, *size)).astype(np.float32)
        u_elastic, u = rng.random(2).tolist(), rng.random(15).tolist()
        magnitude = magnitude_range[0] + (magnitude_range[1] - magnitude_range[0]) * u_elastic[0]
        sigma = sigma_range[0] + (sigma_range[1] - sigma_range[0]) * u_elastic[1]
        mode = "bilinear" if kind == "image" else "nearest"
        g = RandAffine(prob=1.0, **ranges).rand_affine_grid
        g.R = Replay(u)
        g.randomize()
        g(spatial_size=size, randomize=False)  # makes the matrix of these draws (get_transformation_matrix)
        shift = np.eye(4)
        shape = np.array(x.shape[1:], dtype=np.float64)
        shift[:3, 3] = np.array(start) + (np.array(size) - 1) / 2 - (shape - 1) / 2
        m = torch.as_tensor(shift @ g.get_transformation_matrix().numpy().astype(np.float64), dtype=torch.float32)
        grid = create_grid(spatial_size=size, backend="torch")  # float64, as Rand3DElastic's
        offsets = offsets_of(field, sigma, magnitude)
        grid[:3] += offsets
        grid = (m @ grid.to(torch.float32).reshape((4, -1))).reshape([4, *size])  # AffineGrid: float32
        out = Resample()(torch.from_numpy(x), grid, mode=mode, padding_mode=padding)
        params = {"mode": mode, "padding_mode": padding, "u": u_elastic + u, "magnitude": magnitude, "sigma": sigma,
                  "rotate": list(g.rotate_params), "shear": list(g.shear_params),
                  "translate": list(g.translate_params), "scale": list(g.scale_params),
                  "crop_start": list(start), "crop_size": list(size)}
        add(f"rand_3d_elastic_about_crop_{name}_{kind}", "Rand3DElastic", params, x, np.eye(4), out, field=field,
            offsets=offsets)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261123)
    geometries = {
        "lps": affine((0.8, 0.8, 5.0), (120.5, -80.25, 30.0), flips=(-1, -1, 1)),
        "oblique": affine((0.8, 0.9, 3.0), (-10.0, 5.0, 2.0), rot=rotation(2, 20) @ rotation(0, 10)),
        "psr": affine((1.2, 0.7, 2.5), (3.0, -4.0, 5.0), perm=(1, 2, 0), flips=(1, -1, 1)),
        "ras": affine((1.0, 1.0, 1.0), (0.0, 0.0, 0.0)),
    }
    shape = (9, 7, 5)
    for geo, aff in geometries.items():
        x = volume(rng, 1, shape, "ct")
        for codes in ("RAS", "LPS"):
            out = Orientation(axcodes=codes)(MetaTensor(torch.from_numpy(x), affine=torch.tensor(aff)))
            add(f"orientation_{codes.lower()}_from_{geo}", "Orientation", {"axcodes": codes}, x, aff, out)
        for pixdim, mode in (((1.5, 1.5, 2.0), "bilinear"), ((1.5, 1.5, 2.0), "nearest"), ((1.0, 1.0, 1.0), "bilinear")):
            out = Spacing(pixdim=pixdim, mode=mode)(MetaTensor(torch.from_numpy(x), affine=torch.tensor(aff)))
            add(f"spacing_{mode}_{'x'.join(map(str, pixdim))}_{geo}", "Spacing",
                {"pixdim": list(pixdim), "mode": mode}, x, aff, out)
    four = volume(rng, 4, (8, 6, 5), "mri")
    aff = geometries["oblique"]
    out = Spacing(pixdim=(1.0, 1.0, 1.0), mode="bilinear")(MetaTensor(torch.from_numpy(four), affine=torch.tensor(aff)))
    add("spacing_bilinear_1mm_four_channels_oblique", "Spacing", {"pixdim": [1.0, 1.0, 1.0], "mode": "bilinear"},
        four, aff, out)
    ct = volume(rng, 1, shape, "ct")
    for clip in (True, False):
        out = ScaleIntensityRange(a_min=-57, a_max=164, b_min=0.0, b_max=1.0, clip=clip)(torch.from_numpy(ct))
        add(f"scale_intensity_range_clip_{str(clip).lower()}", "ScaleIntensityRange",
            {"a_min": -57, "a_max": 164, "b_min": 0.0, "b_max": 1.0, "clip": clip}, ct, np.eye(4), out)
    for nonzero in (True, False):
        for channel_wise in (True, False):
            out = NormalizeIntensity(nonzero=nonzero, channel_wise=channel_wise)(torch.from_numpy(four))
            add(f"normalize_intensity_nonzero_{str(nonzero).lower()}_channel_wise_{str(channel_wise).lower()}",
                "NormalizeIntensity", {"nonzero": nonzero, "channel_wise": channel_wise}, four, np.eye(4), out)
    out = NormalizeIntensity(subtrahend=10.0, divisor=4.0)(torch.from_numpy(four))
    add("normalize_intensity_given_mean_std", "NormalizeIntensity", {"subtrahend": 10.0, "divisor": 4.0},
        four, np.eye(4), out)
    fg = np.zeros((1, 11, 9, 7), np.float32)
    fg[0, 3:7, 2:5, 1:6] = rng.random((4, 3, 5)).astype(np.float32) + 0.1
    for margin in (0, 2):
        aff = geometries["lps"]
        out = CropForeground(margin=margin)(MetaTensor(torch.from_numpy(fg), affine=torch.tensor(aff)))
        add(f"crop_foreground_margin_{margin}", "CropForeground", {"select": "> 0", "margin": margin},
            fg, aff, out)
    labels = volume(rng, 1, (6, 5, 4), "label4")
    out = ConvertToMultiChannelBasedOnBratsClasses()(torch.from_numpy(labels))
    add("brats_classes", "ConvertToMultiChannelBasedOnBratsClasses", {}, labels, np.eye(4), out.float())
    small = volume(rng, 1, (5, 8, 3), "mri")
    for size in ((8, 6, 6), (7, 0, 4)):  # odd and even widths, an axis kept (6 < 8; 0)
        aff = geometries["psr"]
        out = SpatialPad(spatial_size=size, method="symmetric")(MetaTensor(torch.from_numpy(small),
                                                                           affine=torch.tensor(aff)))
        add(f"spatial_pad_{'x'.join(map(str, size))}", "SpatialPad", {"spatial_size": list(size)}, small, aff, out)
    random_intensity_cases(np.random.default_rng(20261126))
    random_affine_cases(np.random.default_rng(20261127))
    random_elastic_cases(np.random.default_rng(20261128))
    random_bias_field_cases(np.random.default_rng(20261129))
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"monai": monai.__version__, "torch": torch.__version__, "cases": cases}, f, indent=1)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
