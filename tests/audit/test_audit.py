"""volshard.audit's own tests: check() on loaders made in the test, the
launcher's failures (a script that raises, one that needs CUDA, one that loops
for ever), the fingerprints, the picture's font. The corpus of whole scripts is
test_corpus.py."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, TensorDataset

import volshard.audit as audit
from volshard.audit import picture, states

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SQUARES = TensorDataset(torch.arange(16, dtype=torch.float32).unsqueeze(1))


class HeldGenerator(Dataset):
    """Augments with a RandomState of its own: copied into every worker."""

    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([float(i) + self.rng.uniform()])


def test_check_passes_a_distributed_loader_with_set_epoch():
    def make_loader(rank, world_size):
        sampler = DistributedSampler(SQUARES, num_replicas=world_size, rank=rank, seed=0)
        return DataLoader(SQUARES, batch_size=4, sampler=sampler)

    result = audit.check(make_loader, world_size=2, epochs=2)
    assert result.ok and result.findings == [], result.report
    loader = result.document["loaders"][0]
    assert [[r["samples"] for r in e["ranks"]] for e in loader["epochs"]] == [[8, 8], [8, 8]]


def test_check_finds_a_sampler_seeded_with_the_rank():
    def make_loader(rank, world_size):
        sampler = DistributedSampler(SQUARES, num_replicas=world_size, rank=rank, seed=rank)
        return DataLoader(SQUARES, batch_size=4, sampler=sampler)

    result = audit.check(make_loader, world_size=2, epochs=2)
    assert result.kinds == {"shard_overlap", "shard_gap"}, result.report
    overlap = next(f for f in result.findings if f["kind"] == "shard_overlap")
    assert overlap["level"] == "error" and overlap["ranks"] == [0, 1] and overlap["examples"]
    assert "different seeds" in overlap["message"] and "same seed" in overlap["fix"]


def test_check_finds_workers_that_share_a_generator_the_dataset_holds():
    def make_loader(rank, world_size):
        data = HeldGenerator(seed=rank)
        sampler = DistributedSampler(data, num_replicas=world_size, rank=rank)
        return DataLoader(data, batch_size=1, sampler=sampler, num_workers=2)

    result = audit.check(make_loader, world_size=2, epochs=2, reruns=1)
    assert result.kinds == {"worker_rng_shared", "augmentation_repeats_across_epochs"}, result.report
    shared = next(f for f in result.findings if f["kind"] == "worker_rng_shared")
    assert "dataset.rng" in shared["message"] and "get_worker_info().seed" in shared["fix"]


class GeneratorPerSample(Dataset):
    """Makes each sample's generator from (seed, epoch, index): what the workers copied does not matter."""

    def __init__(self):
        self.epoch = 0
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        self.rng = np.random.default_rng((5, self.epoch, i))
        return torch.tensor([float(i) + self.rng.uniform()])


def test_check_passes_workers_that_make_a_generator_per_sample():
    def make_loader(rank, world_size):
        data = GeneratorPerSample()
        sampler = DistributedSampler(data, num_replicas=world_size, rank=rank)
        return DataLoader(data, batch_size=1, sampler=sampler, num_workers=2)

    result = audit.check(make_loader, world_size=2, epochs=2, reruns=1)
    assert result.findings == [], result.report


def test_check_calls_padding_of_a_scored_loader_an_error_and_of_a_training_loader_a_note():
    five = TensorDataset(torch.arange(5, dtype=torch.float32))

    def make_val_loader(rank, world_size):
        return DataLoader(five, sampler=DistributedSampler(five, num_replicas=world_size, rank=rank, shuffle=False))

    scored = audit.check(make_val_loader, world_size=2, epochs=1, reruns=1)
    assert [(f["kind"], f["level"], f["examples"]) for f in scored.findings] == [("padded_duplicates", "error", [0])]
    trained = audit.check(make_val_loader, world_size=2, epochs=1, reruns=1, scored=False)
    assert [(f["kind"], f["level"]) for f in trained.findings] == [("padded_duplicates", "note")]
    assert trained.ok and not scored.ok


def test_check_names_the_first_batch_where_a_rerun_differs():
    def make_loader(rank, world_size):
        entropy = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        return DataLoader(SQUARES, batch_size=4, sampler=RandomSampler(SQUARES, generator=entropy))

    result = audit.check(make_loader, world_size=1, epochs=1)
    assert [f["kind"] for f in result.findings] == ["rerun_differs"], result.report
    assert "epoch 0, rank 0, batch 0" in result.findings[0]["message"]


class Bootstrap(torch.utils.data.Sampler):
    """Draws its indices with replacement, seeded per rank: repeats and overlaps are what it is for."""

    def __init__(self, n, rank):
        self.n, self.rank = n, rank

    def __iter__(self):
        g = torch.Generator().manual_seed(100 + self.rank)
        return iter(torch.randint(self.n, (self.n,), generator=g).tolist())

    def __len__(self):
        return self.n


def test_check_does_not_judge_the_shards_of_a_custom_sampler_that_overlaps_by_design():
    def make_loader(rank, world_size):
        return DataLoader(SQUARES, batch_size=4, sampler=Bootstrap(len(SQUARES), rank))

    result = audit.check(make_loader, world_size=2, epochs=1)
    assert result.findings == [], result.report


def test_check_finds_a_custom_sampler_that_gives_every_rank_the_same_part():
    def make_loader(rank, world_size):
        return DataLoader(SQUARES, batch_size=4, sampler=torch.utils.data.SubsetRandomSampler(range(8)))

    result = audit.check(make_loader, world_size=2, epochs=1)
    # check() starts both ranks from one global state: the subset is drawn in one order too.
    assert result.kinds == {"shard_overlap", "same_order_across_ranks"}, result.report


def test_check_leaves_a_distributed_sampler_over_another_index_space_to_its_owner():
    # A wrapper in the manner of Lightning's DistributedSamplerWrapper: the DistributedSampler splits
    # the positions of another sampler's draws, which are the dataset's indices.
    class Positions(torch.utils.data.Dataset):
        def __init__(self, draws):
            self.draws = draws

        def __len__(self):
            return len(self.draws)

    class Wrapper(DistributedSampler):
        def __iter__(self):
            return (self.dataset.draws[i] for i in super().__iter__())

    draws = [0, 5, 1, 1, 9, 2, 3, 3, 7, 7, 4, 12, 6, 6, 8, 15]  # a weighted sampler's draws: repeats meant

    def make_loader(rank, world_size):
        return DataLoader(SQUARES, batch_size=4, sampler=Wrapper(Positions(draws), num_replicas=world_size,
                                                                rank=rank, shuffle=False))

    result = audit.check(make_loader, world_size=2, epochs=1)
    assert result.findings == [], result.report


def test_check_leaves_the_global_random_state_as_it_found_it():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)

    def make_loader(rank, world_size):
        return DataLoader(SQUARES, batch_size=4, shuffle=True)  # draws from torch's global generator

    audit.check(make_loader, world_size=1, epochs=2)
    assert torch.equal(torch.rand(3), expected)


def test_fingerprints_ignore_metadata_and_key_order_but_not_values():
    a = {"image": torch.ones(2, 2), "label": np.zeros(3, dtype=np.int32), "applied_operations": [{"id": 123}]}
    b = {"applied_operations": [{"id": 456}], "label": np.zeros(3, dtype=np.int32), "image": torch.ones(2, 2)}
    assert states.fingerprint(a) == states.fingerprint(b)
    b["image"][0, 0] = 2
    assert states.fingerprint(a) != states.fingerprint(b)
    monai_data = pytest.importorskip("monai.data")
    m1 = monai_data.MetaTensor(torch.ones(3), meta={"filename_or_obj": "a.nii"})
    m2 = monai_data.MetaTensor(torch.ones(3), meta={"filename_or_obj": "b.nii"})
    assert states.fingerprint(m1) == states.fingerprint(m2) == states.fingerprint(torch.ones(3))


def test_generators_are_found_through_monai_transforms_and_named_by_path():
    transforms = pytest.importorskip("monai.transforms")
    compose = transforms.Compose([transforms.RandFlipd(keys="image", prob=0.5),
                                  transforms.RandCropByPosNegLabeld(keys="image", label_key="image",
                                                                    spatial_size=(2, 2))])
    compose.set_random_state(0)

    class WithTransforms(Dataset):
        def __init__(self):
            self.transform = compose
            self.extra = [np.random.default_rng(1)]

    names = [name for name, _ in states.generators(WithTransforms())]
    assert "dataset.transform.transforms[0].R" in names
    assert "dataset.transform.transforms[1].cropper.R" in names
    assert "dataset.extra[0]" in names


def test_picture_font_is_cores():
    with open(os.path.join(ROOT, "core", "src", "png.cpp")) as f:
        table = re.search(r"kFont5x7\[95\]\[5\] = \{(.*?)\n\};", f.read(), re.S).group(1)
    assert bytes(int(v, 16) for v in re.findall(r"0x([0-9A-Fa-f]{2})", table)) == picture.FONT_5X7


def _audit(tmp_path, source, *flags):
    script = tmp_path / "script.py"
    script.write_text(source)
    out = tmp_path / "audit.json"
    p = subprocess.run([sys.executable, "-m", "volshard.audit", "--nproc-per-node", "1", "--reruns", "1",
                        "--json", str(out), *flags, str(script)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return p, (json.loads(out.read_text()) if out.exists() else None)


def test_a_script_that_fails_exits_2_naming_its_error_and_line(tmp_path):
    p, doc = _audit(tmp_path, "import torch\n\nraise ValueError('no data folder')\n")
    assert p.returncode == 2 and doc is None
    assert "ValueError: no data folder" in p.stderr and "script.py:3" in p.stderr


def test_a_script_that_needs_cuda_here_is_told_so(tmp_path):
    p, _ = _audit(tmp_path, "import torch\nx = torch.zeros(2, device='cuda')\n")
    assert p.returncode == 2
    assert "script.py:2" in p.stderr and "CUDA" in p.stderr and "torch.cuda.is_available()" in p.stderr


def test_an_endless_script_stops_after_its_epochs_even_through_except_exception(tmp_path):
    source = (
        "import torch, torch.distributed as dist\n"
        "from torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n"
        "dist.init_process_group('nccl')\n"
        "data = TensorDataset(torch.arange(6.0))\n"
        "sampler = DistributedSampler(data)\n"
        "loader = DataLoader(data, sampler=sampler, batch_size=2)\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1).cuda(), device_ids=[0])\n"
        "epoch = 0\n"
        "while True:\n"
        "    sampler.set_epoch(epoch)\n"
        "    try:\n"
        "        for (x,) in loader:\n"
        "            model(x.to('cuda:0').unsqueeze(1)).sum().backward()\n"
        "    except Exception:\n"
        "        pass\n"
        "    epoch += 1\n")
    p, doc = _audit(tmp_path, source, "--epochs", "3")
    assert p.returncode == 0, p.stderr
    assert [e["epoch"] for e in doc["loaders"][0]["epochs"]] == [0, 1, 2]
    assert {s["what"] for s in doc["substitutions"]} == {"backend", "module.cuda", "ddp", "Tensor.to"}


def test_a_loader_read_in_full_at_every_step_does_not_end_the_rank_before_the_training_epochs(tmp_path):
    source = (
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "train_loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2)\n"
        "calibration = DataLoader(TensorDataset(torch.arange(2.0)), batch_size=2)\n"
        "for epoch in range(5):\n"
        "    for (x,) in train_loader:\n"
        "        for (c,) in calibration:\n"
        "            (x + c.sum()).sum()\n")
    p, doc = _audit(tmp_path, source)
    assert p.returncode == 0, p.stderr
    epochs = {loader["name"]: [e["epoch"] for e in loader["epochs"] if all(r["complete"] for r in e["ranks"])]
              for loader in doc["loaders"]}
    assert epochs["train_loader"] == [0, 1] and len(epochs["calibration"]) >= 8


def test_a_stopped_script_s_teardown_cannot_fail_the_audit(tmp_path):
    # The audit stops the script; what its teardown does is not audited. Gloo's
    # C++ destructors once aborted a stopped rank at interpreter exit about one
    # exit in six (a CI failure); this teardown aborts every time.
    source = (
        "import atexit, os, torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "atexit.register(os.abort)\n"
        "loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2)\n"
        "for epoch in range(5):\n"
        "    for (x,) in loader:\n"
        "        pass\n")
    p, doc = _audit(tmp_path, source)
    assert p.returncode == 0, p.stderr
    assert [e["epoch"] for e in doc["loaders"][0]["epochs"]] == [0, 1]


def test_a_missing_script_exits_2(tmp_path):
    assert audit.main(["--nproc-per-node", "2", str(tmp_path / "nowhere.py")]) == 2


def test_volshard_audit_imports_without_the_compiled_module():
    p = subprocess.run([sys.executable, "-c", "import volshard.audit, volshard; print(volshard._missing is not None)"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"),
                                                                PYTHONDONTWRITEBYTECODE="1"))
    assert p.returncode == 0 and p.stdout.strip() == "True", p.stderr
