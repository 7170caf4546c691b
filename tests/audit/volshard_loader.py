"""volshard's own Loader in a DDP loop: volshard.DistributedSampler (torch's
shards), set_epoch each epoch, crops and rotations from per-sample seed streams
on C++ threads. Needs the compiled module. No finding."""
import argparse
import os

import nibabel as nib
import numpy as np
import torch.distributed as dist

import volshard


def write_volumes(folder, count=8, size=24):
    """Spheres of random centres and radii, image and label pairs, as MONAI's tutorial writes them."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.RandomState(0)
    grid = np.indices((size, size, size)).astype(np.float32)
    for i in range(count):
        centre, radius = rng.randint(8, size - 8, 3), rng.randint(3, 7)
        label = (((grid - centre[:, None, None, None]) ** 2).sum(0) <= radius ** 2).astype(np.float32)
        image = label * rng.uniform(0.5, 1.0) + rng.uniform(0, 0.1, label.shape).astype(np.float32)
        nib.save(nib.Nifti1Image(image.astype(np.float32), np.eye(4)), os.path.join(folder, f"img{i}.nii.gz"))
        nib.save(nib.Nifti1Image(label, np.eye(4)), os.path.join(folder, f"seg{i}.nii.gz"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    args = p.parse_args()
    if int(os.environ["RANK"]) == 0 and not os.path.exists(os.path.join(args.dir, "seg7.nii.gz")):
        write_volumes(args.dir)
    dist.init_process_group("gloo")  # rank 0 joins once the volumes are written
    pairs = volshard.pairs_from_folder(args.dir)
    sampler = volshard.DistributedSampler(len(pairs), shuffle=True, seed=0)
    train_loader = volshard.Loader(pairs, sampler, crop=16, num_samples=2, batch_size=2, workers=2)
    for epoch in range(3):
        train_loader.set_epoch(epoch)
        for batch in train_loader:
            batch["image"].mean()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
