"""MONAI-style dict data: keys=("img", "seg") as MONAI's DDP tutorial names its files and batches
(LoadImaged(keys=["img", "seg"]), batch_data["img"]); ValidationLoader refuses a transform= with what to do
(Loader runs one after its pipeline: test_user_transform.py)."""

import json
import os

import pytest
import torch

import volshard

KW = {"crop": 16, "num_samples": 2, "batch_size": 2, "workers": 1}


def monai_files(folder):
    """The tutorial's train_files: [{"img": img, "seg": seg}, ...]."""
    return [{"img": p["image"], "seg": p["label"]} for p in volshard.pairs_from_folder(folder)]


def batches(data, **kw):
    loader = volshard.Loader(data, volshard.DistributedSampler(6, num_replicas=1, rank=0, seed=1), **dict(KW, **kw))
    out = list(loader)
    loader.close()
    return out


@pytest.mark.parametrize("keys", [("img", "seg"), ["img", "seg"], {"image": "img", "label": "seg"}])
def test_keys_read_the_tutorials_dicts_and_name_the_batch_as_it_does(synth_data, keys):
    plain = batches(synth_data)
    named = batches(monai_files(synth_data), keys=keys)
    assert len(named) == len(plain)
    for a, b in zip(plain, named):
        assert "image" not in b and "label" not in b
        assert torch.equal(a["image"], b["img"]) and torch.equal(a["label"], b["seg"])
        assert a["index"] == b["index"] and a["crop_start"] == b["crop_start"]


def test_keys_read_a_datalist_of_those_keys_and_its_split(synth_data, tmp_path):
    files = monai_files(synth_data)
    datalist = tmp_path / "list.json"
    datalist.write_text(json.dumps({"training": files[:4], "validation": files[4:]}))
    keys = ("img", "seg")
    assert volshard.pairs_from_datalist(str(datalist), keys=keys) == files[:4]
    sampler = volshard.DistributedSampler(4, num_replicas=1, rank=0, seed=1)
    loader = volshard.Loader(str(datalist), sampler, split="training", keys=keys, **KW)
    assert {i for b in loader for i in b["index"]} == {0, 1, 2, 3}
    loader.close()
    items = list(volshard.ValidationLoader(str(datalist), keys=keys))
    assert [i["source"] for i in items] == [f["img"] for f in files[4:]]
    assert all(set(i) == {"img", "seg", "index", "source", "affine"} for i in items)
    with pytest.raises(RuntimeError, match=r"training\[0\] has no string \"image\""):  # the Decathlon's names
        volshard.pairs_from_datalist(str(datalist))


def test_keys_name_the_batch_moved_to_a_device(synth_data, meta_device):
    moved = batches(monai_files(synth_data), keys=("img", "seg"), device="meta")
    assert moved and all(b["img"].device.type == "meta" and b["seg"].device.type == "meta" for b in moved)


def test_tutorial_dicts_without_keys_are_told_to_pass_them(synth_data):
    with pytest.raises(ValueError, match=r"data\[0\] has no 'image' or 'label' key.*keys=\('img', 'seg'\)"):
        volshard.Loader(monai_files(synth_data))


@pytest.mark.parametrize("keys,message", [
    (("img",), r"keys=\('img',\) must be \(image key, label key\)"),
    (("img", "img"), r"keys=\('img', 'img'\): the image and label keys must differ"),
    ({"image": "img"}, r"keys=\{'image': 'img'\} must map 'image' and 'label'"),
    (("img", 3), r"keys=\('img', 3\) must be \(image key, label key\)"),
    (("index", "seg"), r"keys=\('index', 'seg'\): 'index' is the batch's own entry"),
])
def test_bad_keys_are_refused_naming_them(synth_data, keys, message):
    with pytest.raises(ValueError, match=message):
        volshard.Loader(monai_files(synth_data), keys=keys, **KW)


def test_a_transform_argument_is_refused_with_what_to_do_instead(synth_data):
    monai_transforms = pytest.importorskip("monai.transforms")
    transform = monai_transforms.Compose([monai_transforms.ScaleIntensityd(keys="img")])
    with pytest.raises(TypeError, match=r"transform=int is not callable"):
        volshard.Loader(monai_files(synth_data), keys=("img", "seg"), transform=3)
    with pytest.raises(TypeError, match=r"transform=.*pipeline="):
        volshard.ValidationLoader(monai_files(synth_data), keys=("img", "seg"), transform=transform)
    # MONAI's Dataset(data, transform) order: the transform where the sampler goes.
    with pytest.raises(TypeError, match=r"sampler must be a volshard.DistributedSampler, not Compose.*transform=.*"
                                        r"pipeline="):
        volshard.Loader(monai_files(synth_data), transform, keys=("img", "seg"))
