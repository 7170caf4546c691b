"""The pipeline's schema (volshard/datasets/feed.h): every field reaches the command line's flags, a
config file, the Python Loader and RUN/config.json with the same name and value."""

import json
import os
import re
import subprocess

import pytest

import volshard
from volshard import _volshard

# A value other than the default for every pipeline key; a key added to the schema without one here fails
# the first test.
NON_DEFAULT = {
    "orientation": "LPS",
    "pixdim": [1.5, 1.25, 2.0],
    "intensity": "normalize",
    "a_min": -57.0,
    "a_max": 164.0,
    "b_min": 0.25,
    "b_max": 0.75,
    "clip": True,
    "nonzero": True,
    "channel_wise": True,
    "normalize_on": "volume",
    "crop_foreground": True,
    "foreground_margin": 2,
    "spatial_pad": [20, 20, 20],
    "prefix_order": ["intensity", "crop_foreground", "orientation", "spacing"],
    "labels": "decathlon_brats",
    "num_classes": 4,
    "crop_kind": "spatial",
    "crop": [16, 12, 8],  # x, y, z: not a cube
    "num_samples": 2,
    "allow_smaller": True,
    "affine_prob": 0.3,
    "affine_rotate": [0.3, 0.2, 0.1],
    "affine_shear": [0.0, 0.05, 0.0, 0.0, 0.0, 0.02],
    "affine_translate": [2.0, 1.0, 0.0],
    "affine_scale": [0.1],
    "affine_padding": "border",
    "zoom_prob": 0.2,
    "zoom_range": [0.85, 1.25],
    "elastic_prob": 0.4,
    "elastic_sigma": [1.0, 2.0],
    "elastic_magnitude": [3.0, 6.0],
    "rot90_prob": 0.25,
    "flip_prob": 0.5,
    "rand_scale": 0.1,
    "rand_shift": 0.2,
    "rand_scale_prob": 0.5,
    "rand_shift_prob": 0.25,
    "noise_prob": 0.15,
    "noise_std": 0.05,
    "smooth_prob": 0.2,
    "smooth_sigma_x": [0.5, 1.15],
    "smooth_sigma_y": [0.5, 1.0],
    "smooth_sigma_z": [0.25, 0.75],
    "contrast_prob": 0.3,
    "contrast_gamma": [0.7, 1.5],
    "bias_prob": 0.3,
    "bias_degree": 2,
    "bias_coeff": [-0.1, 0.2],
}
# affine_prob and elastic_prob are one step (Rand3DElastic holds the affine): a pipeline sets one of them,
# so each is fed once with the other at its default.
VARIANTS = {"affine": dict(NON_DEFAULT, elastic_prob=0.0), "elastic": dict(NON_DEFAULT, affine_prob=0.0)}
# What `volshard train` sets from the network, not from a flag: decathlon_brats' four labels.
SET_BY_NETWORK = {"num_classes"}
NETWORK = {"out_channels": 3, "activation": "sigmoid", "channels": [4, 8], "strides": [2]}


def test_every_key_of_the_schema_has_a_value_here_other_than_its_default():
    assert list(_volshard._feed_keys()) == list(NON_DEFAULT)
    defaults = json.loads(_volshard._feed_options("{}", "").to_json())
    assert sorted(defaults) == sorted(NON_DEFAULT)
    same = {k for k in NON_DEFAULT if defaults[k] == NON_DEFAULT[k]}
    assert not same, f"these test values are the defaults: {same}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_loader_feeds_every_key_of_a_config_file(synth_data, tmp_path, variant):
    pipeline = VARIANTS[variant]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(pipeline, **NETWORK)))  # the network's keys are not the Loader's
    sampler = volshard.DistributedSampler(6, num_replicas=1, rank=0)
    loader = volshard.Loader(synth_data, sampler, pipeline=str(config), batch_size=1, workers=0)
    assert loader.pipeline == pipeline
    batch = next(iter(loader))
    assert tuple(batch["label"].shape) == (2, 3, 16, 12, 8)  # spatial crops; TC, WT, ET channels
    loader.close()
    assert volshard.Loader(synth_data, sampler, pipeline=pipeline, batch_size=1, workers=0,
                           cache_rate=0).pipeline == pipeline
    # numpy and torch values, as a Python user may hold them
    import numpy
    import torch
    as_arrays = dict(pipeline, pixdim=numpy.array(pipeline["pixdim"]), crop=numpy.array([16, 12, 8]),
                     spatial_pad=torch.tensor(pipeline["spatial_pad"]), rot90_prob=numpy.float32(0.25))
    assert volshard.Loader(synth_data, sampler, pipeline=as_arrays, batch_size=1, workers=0,
                           cache_rate=0).pipeline == pipeline


def test_affine_prob_and_elastic_prob_together_are_refused_naming_both(synth_data):
    sampler = volshard.DistributedSampler(6, num_replicas=1, rank=0)
    # The library's message with the Python names, as every pipeline error.
    with pytest.raises(ValueError, match=re.escape("affine_prob=0.3 and elastic_prob=0.4: one of them")):
        volshard.Loader(synth_data, sampler, pipeline=NON_DEFAULT, batch_size=1, workers=0)


def as_flags(pipeline):
    flags = []
    for key, value in pipeline.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        else:
            flags += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return flags


@pytest.mark.parametrize("given_by,variant", [("config", "affine"), ("flags", "elastic")])
def test_volshard_train_takes_every_key_and_writes_it_to_config_json(synth_data, tmp_path, volshard_bin,
                                                                     given_by, variant):
    help_text = subprocess.run([volshard_bin, "train", "--help"], capture_output=True, text=True).stdout
    for key in NON_DEFAULT:
        assert ("--" + key.replace("_", "-") + " " in help_text) == (key not in SET_BY_NETWORK), key
    pipeline = {k: v for k, v in VARIANTS[variant].items() if k not in SET_BY_NETWORK}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(pipeline if given_by == "config" else {}, **NETWORK)))
    run = tmp_path / "run"
    args = [volshard_bin, "train", "--data", synth_data, "--out", str(run), "--config", str(config), "--epochs",
            "1", "--max-steps", "1", "--batch-size", "1", "--workers", "0", "--threads", "1", "--val-every", "0"]
    p = subprocess.run(args + (as_flags(pipeline) if given_by == "flags" else []), capture_output=True, text=True,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), timeout=600)
    assert p.returncode == 0, p.stderr
    written = json.loads((run / "config.json").read_text())
    assert {k: written[k] for k in pipeline} == pipeline
    assert not SET_BY_NETWORK & set(written)
    # A run's config.json is a pipeline for Python too: every key of it is known.
    assert volshard.ValidationLoader(synth_data, split=None, pipeline=str(run / "config.json")) is not None


def test_a_config_key_neither_the_pipelines_nor_volshard_trains_is_refused_as_the_cli_refuses_it(
        synth_data, tmp_path, volshard_bin, configs_dir):
    # flip_probability is no key (flip_prob is): the CLI refuses the file, and so does Python, which
    # used to drop the key and train without flips.
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(NETWORK, flip_probability=0.5, lr=0.001)))
    cli = subprocess.run([volshard_bin, "train", "--config", str(config), "--data", synth_data, "--out",
                          str(tmp_path / "run")], capture_output=True, text=True)
    assert cli.returncode == 2 and "unknown key 'flip_probability'" in cli.stderr, cli.stderr
    sampler = volshard.DistributedSampler(6, num_replicas=1, rank=0)
    for make in (lambda: volshard.Loader(synth_data, sampler, pipeline=str(config)),
                 lambda: volshard.ValidationLoader(synth_data, split=None, pipeline=str(config))):
        with pytest.raises(ValueError, match=re.escape(f"pipeline={config}: unknown key 'flip_probability'")):
            make()
    # Network, optimiser and schedule keys are known keys: every shipped config is read whole.
    for name in sorted(os.listdir(configs_dir)):
        if name.endswith(".json"):
            volshard.ValidationLoader(synth_data, split=None, pipeline=os.path.join(configs_dir, name))


# Misspelt keys, each spelt as a flag too: the CLI's nearest flag is a key of a config file.
MISSPELT = ["pixdims", "a_mim", "flip_probs", "flip_probability", "spatialpad", "num_sample", "epoch", "lerning_rate",
            "crop_kinds", "prefix_ordr"]


@pytest.mark.parametrize("word", MISSPELT)
def test_a_misspelt_key_gets_the_nearest_name_the_cli_gives_its_flag(synth_data, tmp_path, volshard_bin, word):
    cli = subprocess.run([volshard_bin, "train", "--" + word.replace("_", "-"), "1", "--data", synth_data, "--out",
                          str(tmp_path / "run")], capture_output=True, text=True)
    assert cli.returncode == 2 and "unknown flag" in cli.stderr, cli.stderr
    flag = re.search(r"did you mean --([a-z0-9-]+)\?", cli.stderr)
    want = flag.group(1).replace("-", "_") if flag else None
    config = tmp_path / "config.json"
    config.write_text(json.dumps({word: 1}))
    sampler = volshard.DistributedSampler(6, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=re.escape(f"unknown key '{word}'")) as raised:
        volshard.Loader(synth_data, sampler, pipeline=str(config))
    got = re.search(r"did you mean '([a-z0-9_]+)'\?", str(raised.value))
    assert (got.group(1) if got else None) == want, (str(raised.value), cli.stderr)
    # A dict is a pipeline: its keys are the pipeline's, the nearest one named where the CLI names it.
    if want in _volshard._feed_keys():
        with pytest.raises(ValueError, match=re.escape(f"unknown pipeline key '{word}' (did you mean '{want}'?)")):
            volshard.Loader(synth_data, sampler, pipeline={word: 1})
