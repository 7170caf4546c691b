"""MONAI's DDP tutorial loop (tutorials/acceleration/distributed_training/
unet_training_ddp.py), shrunk to run on CPUs in seconds: 8 volumes of 32^3 from
create_test_image_3d instead of 40 of 128^3, 16^3 crops instead of 96^3, a
two-level UNet. The rest is the tutorial's: rank 0 writes the volumes, NCCL and
cuda:LOCAL_RANK (the audit runs them as Gloo on the CPU), MONAI's Dataset,
DistributedSampler(even_divisible=True, shuffle=True) and DataLoader with 2
workers, set_epoch each epoch, and no seed at all: a rerun crops differently
(rerun_differs).

--seeded adds set_determinism(seed=rank) (then no finding). With it,
--mistake no_set_epoch forgets train_sampler.set_epoch(epoch) (no_reshuffle);
--mistake same_seed calls set_determinism(seed=0) on every rank, as MONAI's
BraTS DDP tutorial does: every rank draws the same crops (rank_rng_shared, a
note); --mistake torch_dataloader uses torch's DataLoader, whose workers all
copy the transforms' random state (worker_rng_shared), afresh at every epoch
(augmentation_repeats_across_epochs). Reruns still agree: a Compose made after
set_determinism seeds its transforms from it."""
import argparse
import os
import sys
from glob import glob

import nibabel as nib
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import monai
from monai.data import DataLoader, Dataset, DistributedSampler, create_test_image_3d
from monai.transforms import (Compose, EnsureChannelFirstd, EnsureTyped, LoadImaged, RandCropByPosNegLabeld,
                              RandRotate90d, ScaleIntensityd)
from monai.utils import set_determinism


def train(args):
    # disable logging for processes except 0 on every node
    if int(os.environ["LOCAL_RANK"]) != 0:
        f = open(os.devnull, "w")
        sys.stdout = sys.stderr = f
    elif not os.path.exists(args.dir):
        # create random image, mask pairs for training
        os.makedirs(args.dir)
        # set random seed to generate same random data for every node
        np.random.seed(seed=0)
        for i in range(8):
            im, seg = create_test_image_3d(32, 32, 32, num_seg_classes=1, channel_dim=-1, rad_max=8, rad_min=3)
            n = nib.Nifti1Image(im, np.eye(4))
            nib.save(n, os.path.join(args.dir, f"img{i:d}.nii.gz"))
            n = nib.Nifti1Image(seg, np.eye(4))
            nib.save(n, os.path.join(args.dir, f"seg{i:d}.nii.gz"))

    # initialize the distributed training process, every GPU runs in a process
    dist.init_process_group(backend="nccl", init_method="env://")
    if args.seeded:
        set_determinism(seed=0 if args.mistake == "same_seed" else dist.get_rank())

    images = sorted(glob(os.path.join(args.dir, "img*.nii.gz")))
    segs = sorted(glob(os.path.join(args.dir, "seg*.nii.gz")))
    train_files = [{"image": img, "label": seg} for img, seg in zip(images, segs)]

    # define transforms for image and segmentation
    train_transforms = Compose(
        [
            LoadImaged(keys=["image", "label"]),
            EnsureChannelFirstd(keys=["image", "label"], channel_dim=-1),
            ScaleIntensityd(keys="image"),
            RandCropByPosNegLabeld(
                keys=["image", "label"], label_key="label", spatial_size=[16, 16, 16], pos=1, neg=1, num_samples=4
            ),
            RandRotate90d(keys=["image", "label"], prob=0.5, spatial_axes=[0, 2]),
            EnsureTyped(keys=["image", "label"]),
        ]
    )

    # create a training data loader
    train_ds = Dataset(data=train_files, transform=train_transforms)
    # create a training data sampler
    train_sampler = DistributedSampler(dataset=train_ds, even_divisible=True, shuffle=True)
    # use batch_size=2 to load images and use RandCropByPosNegLabeld to generate 2 x 4 images for network training
    loader_class = torch.utils.data.DataLoader if args.mistake == "torch_dataloader" else DataLoader
    train_loader = loader_class(
        train_ds,
        batch_size=2,
        shuffle=False,
        num_workers=2,
        pin_memory=True,
        sampler=train_sampler,
        **({"collate_fn": monai.data.list_data_collate} if args.mistake == "torch_dataloader" else {}),
    )

    # create UNet, DiceLoss and Adam optimizer
    device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}")
    torch.cuda.set_device(device)
    model = monai.networks.nets.UNet(
        spatial_dims=3,
        in_channels=1,
        out_channels=1,
        channels=(4, 8),
        strides=(2,),
        num_res_units=1,
    ).to(device)
    loss_function = monai.losses.DiceLoss(sigmoid=True).to(device)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    # wrap the model with DistributedDataParallel module
    model = DistributedDataParallel(model, device_ids=[device])

    # start a typical PyTorch training
    for epoch in range(5):
        model.train()
        if args.mistake != "no_set_epoch":
            train_sampler.set_epoch(epoch)
        for batch_data in train_loader:
            inputs, labels = batch_data["image"].to(device), batch_data["label"].to(device)
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = loss_function(outputs, labels)
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-d", "--dir", default="./testdata", type=str, help="directory to create random data")
    parser.add_argument("--seeded", action="store_true")
    parser.add_argument("--mistake", choices=["none", "no_set_epoch", "same_seed", "torch_dataloader"],
                        default="none")
    args = parser.parse_args()
    train(args=args)


if __name__ == "__main__":
    main()
