"""volshard.Loader: the C++ pipeline from Python."""

import os
import subprocess
import sys

import pytest
import torch

import volshard

KW = {"crop": 16, "num_samples": 2, "batch_size": 2, "cache_rate": 1.0}


def epoch_batches(data, workers, epoch=0, world=2, rank=0, seed=3, **kw):
    sampler = volshard.DistributedSampler(6, num_replicas=world, rank=rank, seed=seed)
    loader = volshard.Loader(data, sampler, workers=workers, **dict(KW, **kw))
    loader.set_epoch(epoch)
    out = list(loader)
    loader.close()
    return out, sampler


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x["index"] == y["index"] and x["patch_index"] == y["patch_index"]
        for key in ("image", "label"):
            assert x[key].dtype == y[key].dtype and x[key].shape == y[key].shape
            assert x[key].contiguous().numpy().tobytes() == y[key].contiguous().numpy().tobytes()


def test_batches_are_byte_identical_for_0_1_2_workers_and_reruns(synth_data):
    ref, sampler = epoch_batches(synth_data, 0, epoch=1)
    for workers in (0, 1, 2):
        same(epoch_batches(synth_data, workers, epoch=1)[0], ref)
    # Rows: the rank's indices in order, num_samples crops each.
    rows = [i for b in ref for i in b["index"]]
    sampler.set_epoch(1)
    assert rows == [i for i in list(sampler) for _ in range(KW["num_samples"])]
    b = ref[0]
    assert isinstance(b["image"], torch.Tensor) and tuple(b["image"].shape) == (4, 1, 16, 16, 16)
    assert b["label"].dtype == torch.float32


def test_epochs_and_seeds_change_the_batches(synth_data):
    a = epoch_batches(synth_data, 1, epoch=0)[0]
    b = epoch_batches(synth_data, 1, epoch=1)[0]
    c = epoch_batches(synth_data, 1, epoch=0, seed=4)[0]
    assert [x["index"] for x in a] != [x["index"] for x in b] or not torch.equal(a[0]["image"], b[0]["image"])
    assert not torch.equal(a[0]["image"], c[0]["image"])


def test_ranks_read_disjoint_indices(synth_data):
    seen = [set(i for b in epoch_batches(synth_data, 1, world=2, rank=r)[0] for i in b["index"]) for r in (0, 1)]
    assert seen[0].isdisjoint(seen[1]) and seen[0] | seen[1] == set(range(6))


def test_state_dict_resumes_after_the_batches_returned(synth_data):
    full, _ = epoch_batches(synth_data, 2, epoch=2, world=1)
    assert len(full) == 3
    sampler = volshard.DistributedSampler(6, num_replicas=1, rank=0, seed=3)
    loader = volshard.Loader(synth_data, sampler, workers=2, **KW)
    loader.set_epoch(2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    loader.close()
    assert state["epoch"] == 2 and state["sampler"]["consumed"] == 2
    other_seed = volshard.Loader(synth_data, volshard.DistributedSampler(6, num_replicas=1, rank=0), **KW)
    with pytest.raises(ValueError, match="seed=3"):
        other_seed.load_state_dict(state)  # its augmentation would differ
    other_seed.close()
    resumed = volshard.Loader(synth_data, volshard.DistributedSampler(6, num_replicas=1, rank=0, seed=3), workers=1,
                              **KW)
    resumed.load_state_dict(state)
    assert len(resumed) == 3  # batches of an epoch, as torch's DataLoader, not those left
    for method in ("set_epoch", "state_dict", "load_state_dict"):
        assert getattr(volshard.Loader, method).__doc__, method  # help(volshard.Loader) explains them
    resumed.set_epoch(2)
    same(list(resumed), full[1:])


FIFO_PROBE = r"""
import sys
import volshard
data, fifo = sys.argv[1], sys.argv[2]
pairs = volshard.pairs_from_folder(data)[:2]
pairs[1] = {"image": fifo, "label": pairs[1]["label"]}
sampler = volshard.DistributedSampler(2, num_replicas=1, rank=0, shuffle=False)
loader = volshard.Loader(pairs, sampler, workers=0, crop=16, num_samples=1, batch_size=1, cache_rate=0.0)
it = iter(loader)
next(it)  # pairs[0], a file
try:
    next(it)  # the FIFO: opened without waiting for a writer, and refused
except RuntimeError as e:
    print("raised:", e)
"""


def test_a_fifo_among_the_data_is_refused_not_waited_on(synth_data, tmp_path):
    # This probe once proved the GIL released while C++ waited in open() on a FIFO; since readers
    # refuse FIFOs without waiting (issue #43 item 25) no C++ wait is left for Python to control.
    fifo = tmp_path / "img1.nii.gz"
    os.mkfifo(fifo)
    try:
        p = subprocess.run([sys.executable, "-c", FIFO_PROBE, synth_data, str(fifo)], capture_output=True,
                           text=True, timeout=120, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail("the Loader waited on a FIFO for a writer")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "not a regular file (a FIFO)" in p.stdout and str(fifo) in p.stdout


def test_a_folder_a_datalist_and_pairs_are_accepted(synth_data, tmp_path):
    pairs = volshard.pairs_from_folder(synth_data)
    assert len(pairs) == 6 and pairs[0]["image"].endswith("img0.nii.gz")
    as_tuples = [(p["image"], p["label"]) for p in pairs]
    a = epoch_batches(pairs, 0)[0]
    same(epoch_batches(as_tuples, 0)[0], a)
    same(epoch_batches(synth_data, 0)[0], a)


def test_workers_of_a_torch_dataloader_get_their_own_reproducible_seeds():
    class Draws(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            import random
            import numpy
            info = torch.utils.data.get_worker_info()
            return info.id, torch.rand(1).item(), random.random(), float(numpy.random.rand())

    def run(rank):
        sampler = volshard.DistributedSampler(4, num_replicas=1, rank=0)
        dl = torch.utils.data.DataLoader(Draws(), batch_size=None, num_workers=2, sampler=sampler,
                                         worker_init_fn=volshard.worker_init_fn(5, rank=rank, sampler=sampler))
        return sorted(tuple(x) for x in dl)

    a, b, other_rank = run(0), run(0), run(1)
    assert a == b
    assert set(x[1:] for x in a).isdisjoint(set(x[1:] for x in other_rank))
    first = {w: draws for w, *draws in a}
    assert first[0] != first[1]
    torch.manual_seed(volshard.SeedStreams(5).worker_seed(0, 0, 0))
    want = sorted([torch.rand(1).item(), torch.rand(1).item()])  # worker 0 reads items 0 and 2
    assert sorted(x[1] for x in a if x[0] == 0) == want


@pytest.mark.parametrize("kwargs,error,message", [
    ({"crop": 0}, ValueError, "crop=0"),
    ({"crop": (16, 8)}, ValueError, r"crop=16,8 must be one edge \(a cube\) or three"),
    ({"batch_size": 0}, ValueError, "batch_size=0"),
    ({"num_samples": 0}, ValueError, "num_samples=0"),
    ({"pipeline": {"spatial_pad": [8, 8]}}, ValueError, "spatial_pad=8,8"),
    ({"cache_rate": 1.5}, ValueError, "cache_rate=1.5"),
    ({"workers": -1}, ValueError, "workers=-1"),
    # Values that gave data-less or all-NaN batches, or an empty split (#43 item 23).
    ({"pipeline": {"intensity": "range", "a_min": float("-inf")}}, ValueError, "a_min=-inf"),
    ({"cache_device": "meta"}, ValueError, "cache_device='meta': batches are made on the CPU or a CUDA device"),
    ({"split": "training", "val_fraction": float("nan")}, ValueError, "val_fraction=nan must be in"),
])
def test_bad_options_raise_naming_the_value(synth_data, kwargs, error, message):
    with pytest.raises(error, match=message) as raised:
        volshard.Loader(synth_data, volshard.DistributedSampler(6, num_replicas=1, rank=0), **dict(KW, **kwargs))
    assert "--" not in str(raised.value)  # Python's argument names, not the command line's flags


def test_bad_data_raises_naming_the_file_or_item(synth_data, tmp_path):
    s = volshard.DistributedSampler(1, num_replicas=1, rank=0)
    missing = str(tmp_path / "img_missing.nii.gz")
    with pytest.raises(FileNotFoundError, match="img_missing.nii.gz"):
        volshard.Loader([(missing, missing)], s, **KW)
    with pytest.raises(ValueError, match=r"data\[0\]"):
        volshard.Loader([{"image": missing}], s, **KW)
    with pytest.raises(ValueError, match="has 1 items but data has 6"):
        volshard.Loader(synth_data, s, **KW)
    with pytest.raises(TypeError, match="sampler"):
        volshard.Loader(synth_data, list(range(6)), **KW)
    with pytest.raises(FileNotFoundError, match="no_such_folder"):
        volshard.Loader(str(tmp_path / "no_such_folder"), s, **KW)


def test_a_crop_larger_than_the_volume_fails_in_next_naming_the_index(synth_data):
    loader = volshard.Loader(synth_data, volshard.DistributedSampler(6, num_replicas=1, rank=0),
                             **dict(KW, crop=80, workers=1))
    with pytest.raises((ValueError, RuntimeError), match="index"):
        list(loader)
    loader.close()


def test_a_config_file_sets_the_spleen_pipeline(ct_data, configs_dir):
    import os
    data = os.path.join(ct_data, "dataset.json")
    sampler = volshard.DistributedSampler(4, num_replicas=1, rank=0, seed=0)
    loader = volshard.Loader(data, sampler, pipeline=os.path.join(configs_dir, "spleen.json"), crop=8,
                             batch_size=2, workers=1)
    batches = list(loader)
    loader.close()
    # The config's num_samples (4), the crop argument (8), the window clipped to [0, 1].
    assert tuple(batches[0]["image"].shape) == (8, 1, 8, 8, 8)
    for b in batches:
        assert float(b["image"].min()) >= 0.0 and float(b["image"].max()) <= 1.0
        assert set(b["label"].unique().tolist()) <= {0.0, 1.0}


def test_a_pipeline_dict_gives_brats_region_channels_and_flips(ct_data):
    import os
    data = os.path.join(ct_data, "dataset.json")
    sampler = volshard.DistributedSampler(4, num_replicas=1, rank=0, seed=0)
    pipeline = {"labels": "decathlon_brats", "intensity": "normalize", "nonzero": True, "crop_kind": "spatial",
                "crop": 8, "num_samples": 1, "flip_prob": 0.5, "rand_scale": 0.1, "rand_shift": 0.1,
                "rot90_prob": 0.0}
    loader = volshard.Loader(data, sampler, pipeline=pipeline, batch_size=2, workers=0)
    (b, _) = list(loader)
    loader.close()
    assert tuple(b["label"].shape) == (2, 3, 8, 8, 8)  # TC, WT, ET from labels 0/1
    with pytest.raises(ValueError, match="pipeline key"):
        volshard.Loader(data, sampler, pipeline={"pixdims": [1, 1, 1]})
    with pytest.raises(ValueError, match="intensity='zscore'"):
        volshard.Loader(data, sampler, pipeline={"intensity": "zscore"})
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        volshard.Loader(data, sampler, pipeline="nowhere.json")


def test_the_mri_pipelines_random_steps_do_not_depend_on_workers(ct_data):
    import os
    data = os.path.join(ct_data, "dataset.json")
    pipeline = {"intensity": "normalize", "nonzero": True, "crop_kind": "spatial", "crop": 8, "num_samples": 2,
                "flip_prob": 0.5, "rand_scale": 0.1, "rand_shift": 0.1, "rot90_prob": 0.0,
                "orientation": "RAS", "pixdim": [1.5, 1.5, 2.0],
                "affine_prob": 0.7, "affine_rotate": [0.3, 0.2, 0.1], "zoom_prob": 0.5, "zoom_range": [0.8, 1.2]}
    runs = []
    for workers in (0, 1, 2):
        sampler = volshard.DistributedSampler(4, num_replicas=2, rank=1, seed=5)
        loader = volshard.Loader(data, sampler, pipeline=pipeline, batch_size=1, workers=workers)
        loader.set_epoch(3)
        runs.append(list(loader))
        loader.close()
    same(runs[1], runs[0])
    same(runs[2], runs[0])


def test_a_negative_seed_wraps_as_the_samplers_does(synth_data):
    # torch takes seed=-1 (manual_seed wraps it); the sampler does too, and the Loader takes the
    # sampler's seed by default: it must not fail on it, and -1 means 2**64 - 1 for the streams.
    a, _ = epoch_batches(synth_data, 0, seed=-1)
    sampler = volshard.DistributedSampler(6, num_replicas=2, rank=0, seed=-1)
    loader = volshard.Loader(synth_data, sampler, workers=0, seed=(1 << 64) - 1, **KW)
    b = list(loader)
    loader.close()
    same(a, b)


TUNED = """
import torch, volshard
torch.manual_seed(0)
x = torch.rand(2, 4, 40, 40, 40)
w = torch.rand(8, 4, 3, 3, 3)
untuned = torch.nn.functional.conv3d(x, w)
assert volshard.tune_allocator_for_volumes()
a = torch.empty(8 << 20)  # 32 MiB: a large block
p = a.data_ptr()
del a
before = volshard.large_block_stats()
b = torch.zeros(8 << 20)
assert b.data_ptr() == p, "a released volume-sized block serves the next tensor of its size"
assert volshard.large_block_stats()["reused"] == before["reused"] + 1
assert b.sum().item() == 0
small = torch.ones(1 << 10)
assert volshard.large_block_stats()["in_use_bytes"] == before["in_use_bytes"] + (32 << 20)
big = torch.rand(1, 4, 96, 96, 96)  # conv workspaces go through raw_allocate
out = torch.nn.functional.conv3d(big, w)
assert torch.equal(torch.nn.functional.conv3d(x, w), untuned)
assert torch.equal(torch.nn.functional.conv3d(big, w), out)
print("ok")
"""


def test_tune_allocator_for_volumes_reuses_large_blocks_under_torch(tmp_path):
    # A process of its own: the allocator it installs is process-wide.
    import os
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", TUNED], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU machine: scripts/gpu/run.sh)")
def test_pinned_batches_hold_the_pageable_values_and_copy_to_the_gpu(synth_data):
    ref, _ = epoch_batches(synth_data, 1, pin_memory=False)
    pinned, _ = epoch_batches(synth_data, 2, pin_memory=True)
    same(pinned, ref)
    for b in pinned:
        assert b["image"].is_pinned() and b["label"].is_pinned()
        assert torch.equal(b["image"].to("cuda", non_blocking=True).cpu(), b["image"])


def test_sizes_beyond_their_bound_are_refused_before_anything_is_allocated(synth_data):
    sampler = volshard.DistributedSampler(6, num_replicas=1, rank=0)
    for kw, needle in (({"num_samples": 10**9}, "4096"), ({"workers": 100000}, "workers=100000"),
                       ({"cache_threads": 100000}, "threads=100000"), ({"crop": 100000}, r"each in \[1, 4096\]"),
                       ({"crop": (4000, 4000, 4000), "num_samples": 4000}, "needs")):
        with pytest.raises(ValueError, match=needle):
            volshard.Loader(synth_data, sampler, **dict(KW, **kw))


def test_misuse_from_python_is_named(synth_data, tmp_path):
    sampler = volshard.DistributedSampler(6, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"crop=9223372036854775808 is out of range"):
        volshard.Loader(synth_data, sampler, crop=2**63)
    with pytest.raises(ValueError, match=r"pixdim='abc' is not a valid pixdim"):
        volshard.Loader(synth_data, sampler, pipeline={"pixdim": "abc"})

    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return i

    with pytest.raises(TypeError, match="not a Items"):
        volshard.Loader(Items(), sampler)
    folder = tmp_path / "looks_like.json"
    folder.mkdir()
    with pytest.raises(RuntimeError, match="looks_like.json: 0 images match"):
        volshard.Loader(str(folder), sampler)  # a folder, whatever its name


def test_a_second_iterator_supersedes_the_first_by_name(synth_data):
    loader = volshard.Loader(synth_data, volshard.DistributedSampler(6, num_replicas=1, rank=0), workers=0, **KW)
    first = iter(loader)
    next(first)
    second = iter(loader)
    next(second)
    with pytest.raises(RuntimeError, match="superseded by a newer iter"):
        next(first)
    loader.close()


def test_a_forked_child_is_told_to_make_its_own_loader(synth_data):
    loader = volshard.Loader(synth_data, volshard.DistributedSampler(6, num_replicas=1, rank=0), workers=1, **KW)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what iterating does, never hang
        os.close(read)
        try:
            next(iter(loader))
            message = b"iterated"
        except RuntimeError as e:
            message = str(e).encode()
        os.write(write, message)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        message = f.read().decode()
    os.waitpid(pid, 0)
    assert "a fork" in message and "create the Loader in the process that iterates it" in message
    loader.close()


def test_a_misspelt_key_in_a_pipeline_config_is_refused(synth_data, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"pixdims": [1, 1, 1], "channels": [4, 8], "lr": 0.001}')
    with pytest.raises(ValueError, match="unknown key 'pixdims' \\(did you mean 'pixdim'\\?\\)"):
        volshard.Loader(synth_data, volshard.DistributedSampler(6, num_replicas=1, rank=0), pipeline=str(config))
    config.write_text('{"pixdim": [1, 1, 1], "channels": [4, 8], "lr": 0.001}')  # network keys: not the Loader's
    volshard.Loader(synth_data, volshard.DistributedSampler(6, num_replicas=1, rank=0), pipeline=str(config),
                    workers=0, **KW).close()


HIPPOCAMPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data",
                           "msd_hippocampus")


def test_the_hippocampus_config_feeds_the_crops_the_cli_trains_on(volshard_bin, configs_dir, tmp_path):
    # Real scans of eight shapes (uint8 and float32 images, a float32 label):
    # the CLI's trace and the Python Loader's batches name the same crops.
    if not os.path.exists(os.path.join(HIPPOCAMPUS, "dataset.json")):
        pytest.skip(f"{HIPPOCAMPUS} is absent (the Decathlon's Hippocampus set beside the clone; CI has it)")
    import json
    cases = json.load(open(os.path.join(HIPPOCAMPUS, "dataset.json")))["training"][:8]
    datalist = tmp_path / "eight.json"
    datalist.write_text(json.dumps({"training": [{k: os.path.join(HIPPOCAMPUS, v) for k, v in c.items()}
                                                 for c in cases]}))
    config = os.path.join(configs_dir, "hippocampus.json")
    trace = tmp_path / "trace.jsonl"
    p = subprocess.run([volshard_bin, "train", "--config", config, "--datalist", str(datalist), "--out",
                        str(tmp_path / "run"), "--epochs", "1", "--val-every", "0", "--trace-samples", str(trace)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    traced = [json.loads(l) for l in trace.read_text().splitlines()]
    batch_size = json.load(open(config))["batch_size"]
    sampler = volshard.DistributedSampler(8, num_replicas=1, rank=0, seed=0)
    loader = volshard.Loader(str(datalist), sampler, pipeline=config, batch_size=batch_size, workers=2)
    fed = []
    for b in loader:
        assert tuple(b["image"].shape[1:]) == (1, *[json.load(open(config))["crop"]] * 3)
        fed += [(i, p, list(s), k, list(f)) for i, p, s, k, f in
                zip(b["index"], b["patch_index"], b["crop_start"], b["rot90_k"], b["flipped"])]
    loader.close()
    assert fed == [(t["index"], t["patch"], t["crop_start"], t["rot90_k"], t["flipped"]) for t in traced]
    assert len(fed) == 8 * json.load(open(config))["num_samples"]


def test_device_moves_each_batch_and_keeps_the_stream(synth_data, meta_device):
    plain, _ = epoch_batches(synth_data, workers=1)
    on_cpu, _ = epoch_batches(synth_data, workers=1, device="cpu")
    same(plain, on_cpu)
    # "meta" stands in for a GPU here: every batch is moved (shapes, dtypes and metadata kept).
    moved, _ = epoch_batches(synth_data, workers=1, device="meta")
    assert len(moved) == len(plain)
    for a, b in zip(plain, moved):
        assert a["index"] == b["index"] and a["crop_start"] == b["crop_start"]
        for key in ("image", "label"):
            assert b[key].device.type == "meta"
            assert (b[key].dtype, b[key].shape) == (a[key].dtype, a[key].shape)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_a_cuda_device_without_one_is_refused_when_the_loader_is_made(synth_data):
    sampler = volshard.DistributedSampler(6, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match="device='cuda': no CUDA device here"):
        volshard.Loader(synth_data, sampler, device="cuda", **KW)


def test_cache_device_runs_the_gpu_paths_code_and_gives_the_host_batches_on_the_cpu(ct_data, meta_device):
    import os
    data = os.path.join(ct_data, "dataset.json")
    # BraTS's random steps: spatial crops, flips, per-crop normalisation, intensity scale and shift; and
    # RandZoom/RandAffine, which sample the cached volume on its device.
    pipeline = {"intensity": "normalize", "nonzero": True, "crop_kind": "spatial", "crop": 8, "num_samples": 2,
                "flip_prob": 0.5, "rand_scale": 0.1, "rand_shift": 0.1, "rot90_prob": 0.5,
                "affine_prob": 0.7, "affine_rotate": 0.3, "affine_scale": 0.1, "zoom_prob": 0.5}
    runs = []
    for cache_device in (None, "cpu"):
        sampler = volshard.DistributedSampler(4, num_replicas=1, rank=0, seed=2)
        loader = volshard.Loader(data, sampler, pipeline=pipeline, batch_size=2, workers=2, cache_device=cache_device)
        loader.set_epoch(1)
        runs.append(list(loader))
        loader.close()
    same(runs[1], runs[0])
    # "meta" (no data, so a host kernel would fail) stands in for a GPU: the cache and the crops live there.
    sampler = volshard.DistributedSampler(4, num_replicas=1, rank=0, seed=2)
    loader = volshard.Loader(data, sampler, pipeline={"crop_kind": "spatial", "crop": 8, "num_samples": 2,
                                                      "rot90_prob": 0.0}, batch_size=2, workers=0,
                             cache_device="meta")
    batches = list(loader)
    loader.close()
    assert batches and all(b["image"].device.type == "meta" and b["label"].device.type == "meta" for b in batches)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cache_device='cuda': no CUDA device here"):
            volshard.Loader(data, sampler, cache_device="cuda")


def test_a_sampler_sized_for_every_pair_under_a_split_is_told_the_working_form(ct_data):
    # python/README's recipe made the sampler over every pair, then took split="training" (3 of 4).
    datalist = os.path.join(ct_data, "dataset.json")
    every = volshard.DistributedSampler(4, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"has 4 items but split='training' of data has 3: pass sampler=None"
                                         r".*loader\.sampler"):
        volshard.Loader(datalist, every, split="training", crop=8, num_samples=1, workers=0)
    loader = volshard.Loader(datalist, split="training", crop=8, num_samples=1, workers=0)
    assert loader.sampler.dataset == 3 and loader.sampler.shuffle and loader.sampler.seed == 0
    loader.close()


def test_a_missing_file_of_a_datalist_raises_file_not_found_naming_it(synth_data, tmp_path):
    import json
    pairs = volshard.pairs_from_folder(synth_data)
    gone = str(tmp_path / "seg_gone.nii.gz")
    datalist = tmp_path / "list.json"
    datalist.write_text(json.dumps({"training": [pairs[0], {"image": pairs[1]["image"], "label": gone}]}))
    sampler = volshard.DistributedSampler(2, num_replicas=1, rank=0)
    for call in (lambda: volshard.pairs_from_datalist(str(datalist)),
                 lambda: volshard.Loader(str(datalist), sampler, **KW),
                 lambda: volshard.Loader(str(datalist), split="training", **KW),
                 lambda: volshard.ValidationLoader(str(datalist))):
        with pytest.raises(FileNotFoundError, match="seg_gone.nii.gz"):
            call()
    with pytest.raises(FileNotFoundError, match="no_list.json"):
        volshard.Loader(str(tmp_path / "no_list.json"), sampler, **KW)
    with pytest.raises(FileNotFoundError, match="no_such_folder"):
        volshard.Loader(str(tmp_path / "no_such_folder"), sampler, **KW)
