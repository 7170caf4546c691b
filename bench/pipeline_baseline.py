#!/usr/bin/env python3
"""Baseline for bench_pipeline: the MONAI tutorial's data pipeline in numpy + torch's DataLoader.

MONAI is not packaged for Debian; this does what its transforms do (LoadImage via nibabel,
ScaleIntensity, RandCropByPosNegLabel 96^3 x 4 with map_binary_to_indices and
correct_crop_centers, RandRotate90 p=0.5 axes (0,2), list_data_collate) with plain numpy, so
it is a leaner (faster) baseline than MONAI itself. Prints volumes/s.

usage: pipeline_baseline.py DATA_DIR {files,cached} WORKERS EPOCHS
"""
import glob
import os
import sys
import time

import nibabel as nib
import numpy as np
import torch


def load(img_path, seg_path):
    img = np.asanyarray(nib.load(img_path).dataobj, dtype=np.float32)[None]
    seg = np.asanyarray(nib.load(seg_path).dataobj).astype(np.float32)[None]
    lo, hi = img.min(), img.max()
    img = (img - lo) / (hi - lo) if hi > lo else img * 0
    mask = (seg != 0).any(0).ravel()
    return img, seg, np.nonzero(mask)[0], np.nonzero(~mask)[0]


def clamp(c, s, length):
    lo, hi = s // 2, int(length + 1 - s / 2)
    hi += lo == hi
    return min(max(c, lo), hi - 1)


class Tutorial(torch.utils.data.Dataset):
    def __init__(self, pairs, cached):
        self.pairs = pairs
        self.items = [load(*p) for p in pairs] if cached else None
        self.epoch = 0

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        img, seg, fg, bg = self.items[i] if self.items is not None else load(*self.pairs[i])
        rs = np.random.RandomState((i * 7919 + self.epoch) % 2**32)
        shape, size, out = img.shape[1:], 96, []
        for _ in range(4):
            pool = fg if rs.rand() < 0.5 else bg
            c = np.unravel_index(pool[rs.randint(len(pool))], shape)
            s = [clamp(int(c[a]), size, shape[a]) - size // 2 for a in range(3)]
            sl = (slice(None), slice(s[0], s[0] + size), slice(s[1], s[1] + size), slice(s[2], s[2] + size))
            ci, cs = img[sl].copy(), seg[sl].copy()
            k = rs.randint(3) + 1
            if rs.rand() < 0.5:
                ci = np.ascontiguousarray(np.rot90(ci, k, axes=(1, 3)))
                cs = np.ascontiguousarray(np.rot90(cs, k, axes=(1, 3)))
            out.append((torch.from_numpy(ci), torch.from_numpy(cs)))
        return out


def collate(batch):
    crops = [c for item in batch for c in item]
    return torch.stack([c[0] for c in crops]), torch.stack([c[1] for c in crops])


def main():
    data, mode, workers, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    images = sorted(glob.glob(os.path.join(data, "img*.nii.gz")))
    pairs = [(p, p.replace("img", "seg")) for p in images]
    torch.set_num_threads(1)
    ds = Tutorial(pairs, mode == "cached")
    loader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True, num_workers=workers,
                                         collate_fn=collate, persistent_workers=False)
    t0, seen = time.perf_counter(), 0
    for e in range(epochs):
        ds.epoch = e
        for image, _ in loader:
            seen += image.shape[0] // 4
    print(seen / (time.perf_counter() - t0))


if __name__ == "__main__":
    main()
