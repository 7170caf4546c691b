"""Loader(transform=): a per-crop transform of the user's after volshard's pipeline, drawing from the crop's own
stream (a function of seed, epoch, index and patch only), a MONAI transform or any callable(sample, generator)."""

import pytest
import torch

import volshard
from volshard.loader import USER_TRANSFORM_PURPOSE

KW = {"crop": 16, "num_samples": 2, "batch_size": 2, "cache_rate": 1.0}


def noise(sample, generator):
    image = sample["image"]
    return dict(sample, image=image + torch.randn(image.shape, generator=generator))


def batches(data, transform, world=1, rank=0, epoch=0, workers=1, seed=3, **kw):
    sampler = volshard.DistributedSampler(6, num_replicas=world, rank=rank, seed=seed)
    loader = volshard.Loader(data, sampler, transform=transform, workers=workers, **KW, **kw)
    loader.set_epoch(epoch)
    out = [{k: (v.clone() if torch.is_tensor(v) else v) for k, v in b.items()} for b in loader]
    loader.close()
    return out


def by_crop(batch_list, key="image"):
    return {(int(i), int(p)): b[key][r] for b in batch_list
            for r, (i, p) in enumerate(zip(b["index"], b["patch_index"]))}


def test_each_crop_draws_from_its_documented_stream_at_any_world_size_and_worker_count(synth_data):
    plain = by_crop(batches(synth_data, None, epoch=1))
    one = by_crop(batches(synth_data, noise, epoch=1, workers=0))
    two_ranks = {}
    for rank in range(2):
        two_ranks.update(by_crop(batches(synth_data, noise, world=2, rank=rank, epoch=1, workers=2)))
    assert one.keys() == plain.keys() == two_ranks.keys()
    streams = volshard.SeedStreams(3)
    for (index, patch), image in one.items():
        seed = volshard.SeedStreams(streams.sample_seed(index, 1)).shared_seed(USER_TRANSFORM_PURPOSE, patch)
        want = plain[(index, patch)] + torch.randn(image.shape, generator=torch.Generator().manual_seed(seed % (1 << 63)))
        assert torch.equal(image, want), (index, patch)
        assert torch.equal(two_ranks[(index, patch)], image), (index, patch)
    # Another epoch draws another noise for the same crop position (and another crop).
    other = by_crop(batches(synth_data, noise, epoch=2))
    assert any(not torch.equal(other[k], one[k]) for k in one)


def test_a_monai_transform_is_reseeded_per_crop_and_repeats(synth_data):
    transforms = pytest.importorskip("monai.transforms")

    def make():
        return transforms.Compose([transforms.RandGaussianNoised(keys="image", prob=1.0, std=0.5),
                                   transforms.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=0)])

    plain = by_crop(batches(synth_data, None))
    first = by_crop(batches(synth_data, make()))
    again = by_crop(batches(synth_data, make(), workers=2))
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert all(not torch.equal(first[k], plain[k]) for k in first)
    labels = by_crop(batches(synth_data, make()), "label")
    plain_labels = by_crop(batches(synth_data, None), "label")
    flipped = [k for k in labels if not torch.equal(labels[k], plain_labels[k])]
    assert flipped and len(flipped) < len(labels)  # prob 0.5: some crops flipped, not all
    for k in flipped:
        assert torch.equal(labels[k], plain_labels[k].flip(1))


def test_a_transform_that_breaks_the_batch_is_named(synth_data):
    with pytest.raises(TypeError, match="transform must return the sample dict with 'image' and 'label'"):
        batches(synth_data, lambda sample, generator: sample["image"])

    def shrink_some(sample, generator):
        cut = 8 if int(sample["patch_index"]) == 0 else 16
        return dict(sample, image=sample["image"][:, :cut])

    with pytest.raises(ValueError, match="rows of a batch must keep one shape"):
        batches(synth_data, shrink_some)


def test_with_a_device_the_transform_runs_on_the_host_before_the_batch_ahead_is_copied(synth_data, meta_device):
    # device= takes its batches through the trainer's BatchesAhead: the transform is applied to each batch
    # on the host, then its copy issued one batch ahead. On the CPU the bytes are the host path's; on "meta"
    # (a GPU's stand-in: tensors without data) the transformed batch is what was moved.
    host = batches(synth_data, noise, epoch=1)
    on_cpu = batches(synth_data, noise, epoch=1, device="cpu")
    assert [b["index"] for b in on_cpu] == [b["index"] for b in host]
    for a, b in zip(host, on_cpu):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])

    def halve(sample, generator):  # a transform that changes the shape and dtype shows where it ran
        return dict(sample, image=sample["image"][:, ::2].double())

    moved = batches(synth_data, halve, device="meta")
    assert moved and all(b["image"].device.type == "meta" and b["image"].dtype == torch.float64 for b in moved)
    assert all(b["image"].shape[2] == 8 and b["label"].shape[2] == 16 for b in moved)
    with pytest.raises(TypeError, match="transform must return the sample dict with 'image' and 'label'"):
        batches(synth_data, lambda sample, generator: sample["image"], device="cpu")
