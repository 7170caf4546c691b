"""volshard.DistributedSampler against torch.utils.data.DistributedSampler and
MONAI's even_divisible=False (docs/semantics.md §1), and its state."""

import itertools
import json
import warnings

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data import DistributedSampler as TorchSampler

import volshard

SIZES = [1, 2, 5, 7, 10, 17, 33]
WORLDS = [1, 2, 3, 4, 7]


def monai_uneven(n, world, rank, shuffle, seed, epoch):
    """MONAI's DistributedSampler(even_divisible=False): torch's permutation,
    total_size = n, no padding, rank r reads positions r, r + W, ..."""
    if shuffle:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        perm = torch.randperm(n, generator=g).tolist()
    else:
        perm = list(range(n))
    return perm[rank::world]


@pytest.mark.parametrize("n,world", list(itertools.product(SIZES, WORLDS)))
def test_indices_equal_torch_over_modes_seeds_and_epochs(n, world):
    for rank, drop_last, shuffle, seed, epoch in itertools.product(
            range(world), [False, True], [True, False], [0, 3, 2**32 - 1], [0, 1, 5]):
        if drop_last and n < world:
            continue  # torch gives every rank nothing; so do we (checked below)
        ours = volshard.DistributedSampler(n, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed,
                                           drop_last=drop_last)
        theirs = TorchSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed,
                              drop_last=drop_last)
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        case = f"n={n} W={world} r={rank} drop_last={drop_last} shuffle={shuffle} seed={seed} epoch={epoch}"
        assert list(ours) == list(theirs), case
        assert len(ours) == len(theirs), case


@pytest.mark.parametrize("n,world", [(n, w) for n, w in itertools.product(SIZES, WORLDS) if n >= w])
def test_uneven_equals_monai_even_divisible_false(n, world):
    for rank, shuffle, seed, epoch in itertools.product(range(world), [True, False], [0, 11], [0, 2]):
        s = volshard.DistributedSampler(n, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed,
                                        even_divisible=False)
        s.set_epoch(epoch)
        want = monai_uneven(n, world, rank, shuffle, seed, epoch)
        assert list(s) == want
        assert len(s) == len(want)


def test_uneven_refuses_fewer_samples_than_ranks_as_monai():
    with pytest.raises(ValueError, match="num_replicas=3"):
        volshard.DistributedSampler(2, num_replicas=3, rank=0, even_divisible=False)


def test_drop_last_with_fewer_samples_than_ranks_gives_nothing():
    s = volshard.DistributedSampler(2, num_replicas=3, rank=1, drop_last=True)
    assert list(s) == list(TorchSampler(range(2), num_replicas=3, rank=1, drop_last=True)) == []


def test_a_sized_dataset_and_torch_dataloader_sampler():
    data = list(range(100, 123))
    ours = volshard.DistributedSampler(data, num_replicas=3, rank=2, seed=4)
    theirs = TorchSampler(data, num_replicas=3, rank=2, seed=4)
    for epoch in range(3):
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        got = [b.tolist() for b in DataLoader(data, batch_size=3, sampler=ours)]
        want = [b.tolist() for b in DataLoader(data, batch_size=3, sampler=theirs)]
        assert got == want


def test_rank_and_world_come_from_torch_distributed(tmp_path):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        s = volshard.DistributedSampler(10)
        assert (s.num_replicas, s.rank) == (dist.get_world_size(), dist.get_rank())
    finally:
        dist.destroy_process_group()


def test_a_forgotten_set_epoch_warns_once():
    s = volshard.DistributedSampler(10, num_replicas=2, rank=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = list(s)  # the first pass is fine
    with pytest.warns(UserWarning, match="set_epoch") as said:
        assert list(s) == first
    assert "auto_advance_epoch" in str(said[0].message)  # an argument Python has:
    advancing = volshard.DistributedSampler(10, num_replicas=2, rank=0, auto_advance_epoch=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(advancing) == first
        assert list(advancing) != first and advancing.epoch == 1  # the next epoch, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(s)  # once per sampler
        s.set_epoch(1)
        list(s)


def read_ranks(samplers, k):
    """Each sampler yields its first k indices; returns them and the state."""
    taken = []
    for s in samplers:
        it = iter(s)
        taken.append([next(it) for _ in range(k)])
    states = [s.state_dict() for s in samplers]
    return taken, states


@pytest.mark.parametrize("n,world,new_world,mode", [
    (n, w, w2, mode) for n, w, w2, mode in itertools.product(
        [7, 10, 23], [1, 2, 4], [1, 2, 3], ["pad", "uneven", "drop_last"]) if n >= w])
def test_state_round_trip_and_elastic_resume_lose_and_repeat_nothing(n, world, new_world, mode):
    kw = {"even_divisible": mode != "uneven", "drop_last": mode == "drop_last"}
    epoch, seed = 3, 5
    for k in range(0, (n // world) + 1):
        old = [volshard.DistributedSampler(n, num_replicas=world, rank=r, seed=seed, **kw) for r in range(world)]
        for s in old:
            s.set_epoch(epoch)
        if any(k > len(s) for s in old):
            continue
        taken, states = read_ranks(old, k)
        assert all(st == states[0] for st in states), "every rank saves the same state"
        state = json.loads(json.dumps(states[0]))  # plain Python values
        assert state["epoch"] == epoch and state["consumed"] == min(k * world, n)

        new = [volshard.DistributedSampler(n, num_replicas=new_world, rank=r, seed=99) for r in range(new_world)]
        rest = []
        for s in new:
            s.load_state_dict(state)
            s.set_epoch(epoch)  # the same epoch keeps the restored start
            rest.append(list(s))
        before = [i for t in taken for i in t]
        after = [i for r in rest for i in r]
        if new_world == world:  # exactly the rest of the uninterrupted epoch
            full = []
            for r in range(world):
                s = volshard.DistributedSampler(n, num_replicas=world, rank=r, seed=seed, **kw)
                s.set_epoch(epoch)
                full.append(list(s)[k:])
            if mode != "pad" or k * world <= n:
                assert rest == full
        everything = before + after
        if mode == "uneven":
            assert sorted(everything) == list(range(n))
        elif mode == "drop_last":
            assert len(set(everything)) == len(everything), "nothing read twice"
            assert len(everything) > n - world - new_world
        else:
            assert set(everything) == set(range(n)), "nothing lost"
            assert len(everything) - n < world + new_world, "repeats only as padding"


def test_state_survives_torch_save(tmp_path):
    s = volshard.DistributedSampler(20, num_replicas=2, rank=1, seed=7)
    s.set_epoch(2)
    it = iter(s)
    [next(it) for _ in range(4)]
    torch.save({"data": s.state_dict()}, tmp_path / "ckpt.pt")
    t = volshard.DistributedSampler(20, num_replicas=2, rank=1)
    t.load_state_dict(torch.load(tmp_path / "ckpt.pt")["data"])
    assert t.epoch == 2
    assert list(t) == list(it)


@pytest.mark.parametrize("kwargs,message", [
    ({"dataset": 10, "num_replicas": 4, "rank": 4}, "rank=4"),
    ({"dataset": 10, "num_replicas": 2, "rank": -1}, "rank=-1"),
    ({"dataset": 10, "num_replicas": 0, "rank": 0}, "num_replicas=0"),
    ({"dataset": -3, "num_replicas": 1, "rank": 0}, "-3"),
])
def test_bad_arguments_raise_value_error_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        volshard.DistributedSampler(**kwargs)


def test_bad_state_raises_value_error_naming_the_field():
    s = volshard.DistributedSampler(10, num_replicas=2, rank=0)
    state = s.state_dict()
    with pytest.raises(ValueError, match="consumed"):
        s.load_state_dict({k: v for k, v in state.items() if k != "consumed"})
    with pytest.raises(ValueError, match="consumed"):
        s.load_state_dict(dict(state, consumed=11))
    with pytest.raises(ValueError, match="mode"):
        s.load_state_dict(dict(state, mode="sideways"))
