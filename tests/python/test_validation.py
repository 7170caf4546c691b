"""Validation from Python as `volshard train` validates: the split, whole
volumes per rank, MONAI's sliding-window inference; write_volume with numpy."""

import json
import os
import subprocess
import sys

import pytest
import torch

import volshard

np = pytest.importorskip("numpy")
nib = pytest.importorskip("nibabel")


def datalist_pairs(path, section):
    return [(p["image"], p["label"]) for p in volshard.pairs_from_datalist(path, section)]


def test_a_decathlon_datalist_splits_as_the_cli_holds_out_its_tail(ct_data):
    # 4 cases, val_fraction 0.2: round(0.8) = 1 validates, as `volshard train`.
    datalist = os.path.join(ct_data, "dataset.json")
    every = datalist_pairs(datalist, "training")
    sampler = volshard.DistributedSampler(3, shuffle=False)
    train = volshard.Loader(datalist, sampler, split="training", crop=8, num_samples=1, workers=0)
    val = volshard.ValidationLoader(datalist)
    assert len(train.sampler) == 3
    assert val.pairs == every[3:]
    assert [i["source"] for i in val] == [every[3][0]]
    assert volshard.ValidationLoader(datalist, val_fraction=0.5).pairs == every[2:]
    with pytest.raises(ValueError, match=r"too few to hold out val_fraction=0\.9"):
        volshard.ValidationLoader(datalist, val_fraction=0.9)
    with pytest.raises(ValueError, match=r"split='test' must be None, 'training' or 'validation'"):
        volshard.ValidationLoader(datalist, split="test")


def test_a_validation_list_is_taken_as_it_is_and_overlap_refused(ct_data, tmp_path):
    every = datalist_pairs(os.path.join(ct_data, "dataset.json"), "training")
    entries = [{"image": i, "label": l} for i, l in every]
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"training": entries[:2], "validation": entries[2:]}))
    assert volshard.ValidationLoader(str(path)).pairs == every[2:]
    assert volshard.Loader(str(path), volshard.DistributedSampler(2), split="training", crop=8,
                           workers=0).sampler.dataset == 2
    path.write_text(json.dumps({"training": entries[:3], "validation": entries[2:]}))
    with pytest.raises(ValueError, match="is in both \"training\" and \"validation\""):
        volshard.ValidationLoader(str(path))


def test_ranks_share_the_volumes_once_each_as_the_trainer(ct_data):
    datalist = os.path.join(ct_data, "dataset.json")
    for world in (1, 2, 3, 5):
        seen = []
        for rank in range(world):
            seen += volshard.ValidationLoader(datalist, split=None, num_replicas=world, rank=rank).indices
        assert sorted(seen) == [0, 1, 2, 3], world
    assert volshard.ValidationLoader(datalist, split=None, num_replicas=3, rank=0).indices == [0, 3]
    with pytest.raises(ValueError, match=r"rank=3 must be in \[0, num_replicas=3\)"):
        volshard.ValidationLoader(datalist, num_replicas=3, rank=3)


def test_a_validation_volume_is_what_volshard_prepare_writes(ct_data, configs_dir, volshard_bin, tmp_path):
    # The spleen config's prefix on the whole volume: volshard prepare is the
    # CLI's own view of what validation and predict see.
    datalist = os.path.join(ct_data, "dataset.json")
    config = os.path.join(configs_dir, "spleen.json")
    item = next(iter(volshard.ValidationLoader(datalist, pipeline=config)))
    image, label = item["source"], datalist_pairs(datalist, "training")[3][1]
    subprocess.run([volshard_bin, "prepare", "--config", config, "--image", image, "--label", label, "--out",
                    str(tmp_path)], check=True, capture_output=True)
    want = nib.load(str(tmp_path / "image.nii.gz"))
    want_label = np.asarray(nib.load(str(tmp_path / "label.nii.gz")).dataobj)
    assert item["image"].shape == (1, 1) + want.shape
    assert np.array_equal(item["image"][0, 0].numpy(), want.get_fdata(dtype=np.float32))
    assert np.array_equal(item["label"][0, 0].numpy(), want_label.astype(np.float32))
    assert np.allclose(item["affine"].numpy(), want.affine)


monai_inferers = pytest.importorskip("monai.inferers")


@pytest.mark.parametrize("shape,roi,overlap,sw_batch", [
    ((2, 2, 20, 17, 9), 8, 0.25, 1),
    ((1, 1, 12, 12, 12), (8, 6, 16), 0.5, 3),   # an axis shorter than the window: padded symmetrically
    ((1, 2, 9, 10, 11), (-1, 5, 5), 0.0, 4),    # -1: the input's size, as MONAI
])
def test_sliding_window_inference_equals_monai(shape, roi, overlap, sw_batch):
    torch.manual_seed(0)
    net = torch.nn.Conv3d(shape[1], 3, 3, padding=1).eval()
    x = torch.randn(shape)
    with torch.no_grad():
        got = volshard.sliding_window_inference(x, roi, sw_batch, net, overlap=overlap)
        want = monai_inferers.sliding_window_inference(x, roi, sw_batch, net, overlap=overlap)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=0, atol=1e-6), (got - want).abs().max()


@pytest.mark.parametrize("shape,roi,overlap,sw_batch,sigma", [
    ((2, 2, 20, 17, 9), 8, 0.25, 1, 0.125),
    ((1, 1, 12, 12, 12), (8, 6, 16), 0.5, 3, (0.2, 0.1, 0.3)),
])
def test_gaussian_blending_equals_monais_mode_gaussian(shape, roi, overlap, sw_batch, sigma):
    torch.manual_seed(0)
    net = torch.nn.Conv3d(shape[1], 3, 3, padding=1).eval()
    x = torch.randn(shape)
    with torch.no_grad():
        got = volshard.sliding_window_inference(x, roi, sw_batch, net, overlap=overlap, mode="gaussian",
                                                sigma_scale=sigma)
        want = monai_inferers.sliding_window_inference(x, roi, sw_batch, net, overlap=overlap, mode="gaussian",
                                                       sigma_scale=sigma)
        constant = volshard.sliding_window_inference(x, roi, sw_batch, net, overlap=overlap)
    assert torch.allclose(got, want, rtol=0, atol=1e-5), (got - want).abs().max()
    assert not torch.allclose(got, constant, rtol=0, atol=1e-3)  # the weights show


def test_tta_flips_average_the_network_over_the_flips_as_nnunet():
    torch.manual_seed(1)
    net = torch.nn.Conv3d(1, 2, 3, padding=1).eval()
    x = torch.randn(1, 1, 10, 9, 8)
    with torch.no_grad():
        got = volshard.sliding_window_inference(x, 16, 1, net, tta_flips=(0, 1, 2))
        flips = [(), (2,), (3,), (4,), (2, 3), (2, 4), (3, 4), (2, 3, 4)]
        want = sum(torch.flip(net(torch.flip(x, f)), f) if f else net(x) for f in flips) / len(flips)
        plain = volshard.sliding_window_inference(x, 16, 1, net)
    assert torch.allclose(got, want, rtol=0, atol=1e-5), (got - want).abs().max()
    assert not torch.allclose(got, plain, rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match=r"axis 3 must be 0 \(X\), 1 \(Y\) or 2 \(Z\)"):
        volshard.sliding_window_inference(x, 16, 1, net, tta_flips=(3,))


def test_keep_largest_components_keeps_each_classes_largest_26_connected_piece():
    labels = torch.zeros(6, 6, 6, dtype=torch.uint8)
    labels[0, 0, 0] = labels[1, 1, 1] = labels[2, 2, 2] = 1  # one piece of 3, by corners
    labels[5, 5, 5] = 1                                         # a piece of 1: dropped
    labels[0, 5, 0] = labels[0, 5, 1] = 2                       # class 2: a piece of 2 ...
    labels[3, 0, 5] = 2                                         # ... and one of 1
    got = volshard.keep_largest_components(labels)
    want = labels.clone()
    want[5, 5, 5] = 0
    want[3, 0, 5] = 0
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="X x Y x Z"):
        volshard.keep_largest_components(labels[None])


def test_sliding_window_inference_names_bad_arguments():
    net = torch.nn.Identity()
    with pytest.raises(ValueError, match="N x C x X x Y x Z"):
        volshard.sliding_window_inference(torch.zeros(1, 8, 8, 8), 4, 1, net)
    with pytest.raises(ValueError, match="overlap"):
        volshard.sliding_window_inference(torch.zeros(1, 1, 8, 8, 8), 4, 1, net, overlap=1.0)
    with pytest.raises(ValueError, match=r"roi_size=\(4, 4\) must be an int or three ints"):
        volshard.sliding_window_inference(torch.zeros(1, 1, 8, 8, 8), (4, 4), 1, net)
    with pytest.raises(ValueError, match="mode='gauss' must be 'constant' or 'gaussian'"):
        volshard.sliding_window_inference(torch.zeros(1, 1, 8, 8, 8), 4, 1, net, mode="gauss")
    with pytest.raises(ValueError, match="sigma_scale=0 must be in"):
        volshard.sliding_window_inference(torch.zeros(1, 1, 8, 8, 8), 4, 1, net, mode="gaussian", sigma_scale=0)


def test_write_volume_takes_numpy_data_and_affine(tmp_path):
    data = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    affine = np.diag([2.0, 3.0, 4.0, 1.0])
    path = str(tmp_path / "v.nii.gz")
    volshard.write_volume(path, data, affine)
    back = nib.load(path)
    assert np.array_equal(np.asarray(back.dataobj), data)
    assert np.array_equal(back.affine, affine)
    volshard.write_volume(str(tmp_path / "f.nii"), data.astype(np.float32), affine.tolist())
    assert np.array_equal(nib.load(str(tmp_path / "f.nii")).get_fdata(), data)
    with pytest.raises(ValueError, match=r"affine must be 4 x 4, got \(3, 3\)"):
        volshard.write_volume(path, data, np.eye(3))


def test_fingerprints_of_a_python_loop_let_volshard_diff_name_where_two_runs_part(synth_data, volshard_bin, tmp_path):
    def train(run, lr):
        torch.manual_seed(0)
        model = torch.nn.Conv3d(1, 1, 3, padding=1)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        loader = volshard.Loader(synth_data, volshard.DistributedSampler(6, seed=0), crop=16, num_samples=1,
                                 batch_size=2, workers=0)
        fp = volshard.Fingerprint(model, str(tmp_path / run), config={"lr_in_the_loop": "not listed"})
        loader.set_epoch(0)
        for batch in loader:
            loss = ((model(batch["image"]) - batch["label"]) ** 2).mean()
            loss.backward()
            optimizer.step()
            fp.step(batch, loss)
            optimizer.zero_grad()

    train("a", 0.1)
    train("b", 0.1)
    train("c", 0.2)
    same = subprocess.run([volshard_bin, "diff", str(tmp_path / "a"), str(tmp_path / "b")], capture_output=True,
                          text=True)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "steps fingerprinted: 3 (A), 3 (B)" in same.stdout
    other = subprocess.run([volshard_bin, "diff", str(tmp_path / "a"), str(tmp_path / "c")], capture_output=True,
                           text=True)
    assert other.returncode == 1, other.stdout + other.stderr
    # The same first step's data, loss and gradients; the learning rate moves the weights.
    assert "first difference: step 1 (epoch 1), weights (bucket 0 of 2: weight)" in other.stdout, other.stdout
    assert "likely cause: the same gradients gave other weights" in other.stdout


METRIC_RANK = r"""
import sys
import torch.distributed as dist
import volshard
from monai.metrics import DiceMetric
from monai.networks.utils import one_hot

data, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
dice = DiceMetric(include_background=False)
for item in volshard.ValidationLoader(data, split=None):  # this rank's share
    # A fixed prediction of each volume, a little off, and by as much as its index.
    guess = (item["image"] > item["image"].mean()).long().roll(item["index"] + 1, dims=2)
    dice(y_pred=one_hot(guess, 2), y=one_hot(item["label"].long(), 2))
print(repr(dice.aggregate().item()))
dist.destroy_process_group()
"""


def test_monais_metric_of_validation_shares_is_gathered_over_the_ranks_already(synth_data, reserved_port):
    # python/README: DiceMetric.aggregate() on each rank's ValidationLoader share is the metric of all
    # volumes, as one process computes it; an all_reduce on top would count it once per rank.
    pytest.importorskip("monai.metrics")

    def run(world):  # one run after the other on the one reserved port
        procs = [subprocess.Popen([sys.executable, "-c", METRIC_RANK, synth_data, str(r), str(world), reserved_port],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, OMP_NUM_THREADS="1")) for r in range(world)]
        outputs = [p.communicate(timeout=300) for p in procs]
        assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
        return [float(out) for out, _ in outputs]

    (one,) = run(1)
    assert 0 < one < 1
    a, b = run(2)
    assert a == b == pytest.approx(one, rel=1e-6)  # the mean of the same six scores, gathered in rank order
