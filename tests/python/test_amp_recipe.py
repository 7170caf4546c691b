"""python/README.md's mixed-precision recipe, as written there, on the CPU: the Loader's batches
under torch.autocast with torch's GradScaler (float16) and without one (bfloat16)."""

import pytest
import torch

import volshard


def dice_loss(logits, target, eps=1e-5):
    p = torch.sigmoid(logits)
    dims = tuple(range(2, p.dim()))
    return (1 - (2 * (p * target).sum(dims) + eps) / (p.sum(dims) + target.sum(dims) + eps)).mean()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_readme_recipe_trains_a_step_under_autocast(synth_data, dtype):
    device = torch.device("cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv3d(4, 1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = volshard.DistributedSampler(6, num_replicas=1, rank=0, seed=0)
    loader = volshard.Loader(synth_data, sampler, crop=16, num_samples=1, batch_size=2, workers=1)
    before = [p.detach().clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    for batch in loader:
        opt.zero_grad()
        with torch.autocast(device.type, dtype=dtype):
            logits = model(batch["image"].to(device, non_blocking=True))
        assert logits.dtype == dtype  # the convolutions ran in the lower precision
        loss = dice_loss(logits.float(), batch["label"].to(device, non_blocking=True))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    loader.close()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert any(not torch.equal(a, p.detach()) for a, p in zip(before, model.parameters()))
