#!/usr/bin/env python3
"""End-to-end tests of the CT and MRI pipelines on Decathlon-style folders:
`volshard synth --kind ct|mri`, `volshard train --config configs/{spleen,brats}.json
--datalist DIR/dataset.json`, `volshard predict` back onto the input's grid,
`volshard prepare`, and bad input refused before training. The real binaries;
outputs read back with nibabel.

  decathlon_e2e.py --binary build/bin/volshard --configs configs [-k pattern]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import nibabel as nib
    import numpy as np
    import torch
except ImportError:
    print("SKIP: nibabel/numpy/torch are not importable")
    sys.exit(77)

# The CPU's semantics, also on a machine with a GPU: the binaries started here see none
# (train_e2e.py's GpuTest runs them on the GPU).
os.environ["CUDA_VISIBLE_DEVICES"] = ""

BINARY = None
CONFIGS = None

# A tiny UNet and crops: seconds per run on 2 cores.
TINY = ["--channels", "4,8,16", "--strides", "2,2", "--res-units", "1", "--crop", "12",
        "--num-samples", "2", "--batch-size", "1", "--workers", "1", "--threads", "1",
        "--sw-batch-size", "2"]


def run(*args, timeout=900):
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)


def epochs(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [m for m in map(json.loads, f) if m["type"] == "epoch"]


class DecathlonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="volshard_decathlon_")
        cls.ct = os.path.join(cls.root, "Task09_Spleen")
        cls.mri = os.path.join(cls.root, "Task01_BrainTumour")
        for kind, out, count, size in (("ct", cls.ct, 5, 64), ("mri", cls.mri, 4, 32)):
            p = run("synth", "--kind", kind, "--out", out, "--count", count, "--size", size, "--seed", 3)
            assert p.returncode == 0, p.stderr
        with open(os.path.join(cls.ct, "dataset.json")) as f:
            cls.ct_list = json.load(f)["training"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def out(self, name):
        return os.path.join(self.root, name)

    def ct_file(self, i, key):
        return os.path.normpath(os.path.join(self.ct, self.ct_list[i][key]))

    def test_a_crop_larger_than_the_foreground_names_every_such_volume_before_the_loader_starts(self):
        # CropForeground's box needs the voxels: checked once the cache holds them, all volumes named at once.
        tiny = list(TINY)
        tiny[tiny.index("--crop") + 1] = 96
        p = run("train", "--config", os.path.join(CONFIGS, "spleen.json"),
                "--datalist", os.path.join(self.ct, "dataset.json"), "--out", self.out("too_big"), "--epochs", 1,
                "--val-fraction", 0.4, "--roi", 32, "--nproc-per-node", 2, *tiny)
        self.assertEqual(p.returncode, 2, p.stderr)
        last = p.stderr.strip().splitlines()[-1]
        self.assertIn("--crop=96 is larger than 3 of 3 training volume(s) after the prefix (CropForeground cut them): ",
                      last)
        for i in range(3):
            self.assertIn(self.ct_file(i, "image"), last)
        self.assertIn("--spatial-pad=96 or --allow-smaller", last)
        self.assertNotIn("DataLoader", p.stderr)  # not from a loader's worker

    def test_spleen_config_trains_on_the_decathlon_folder_and_predicts_onto_the_input_grid(self):
        run_dir = self.out("spleen_run")
        p = run("train", "--config", os.path.join(CONFIGS, "spleen.json"),
                "--datalist", os.path.join(self.ct, "dataset.json"), "--out", run_dir, "--epochs", 2,
                "--val-every", 1, "--val-fraction", 0.4, "--roi", 32, "--lr", 1e-3,
                "--nproc-per-node", 2, *TINY)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("3 training volume(s) over 2 ranks, 2 a rank: DistributedSampler's padding feeds 1 of them "
                      "twice an epoch; validation: 2 volume(s), the last 2 pair(s)", p.stderr)
        lines = epochs(run_dir)
        self.assertEqual(len(lines), 2)
        self.assertTrue(all(isinstance(m["val_dice"], float) for m in lines), lines)
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        self.assertEqual((config["orientation"], config["pixdim"], config["activation"], config["in_channels"]),
                         ("RAS", [1.5, 1.5, 2.0], "softmax", 1))
        # The prediction is on the image's own (LPS, anisotropic) grid.
        image = self.ct_file(4, "image")
        pred = self.out("spleen_pred.nii.gz")
        p = run("predict", "--model", os.path.join(run_dir, "model.pt"), "--config",
                os.path.join(run_dir, "config.json"), "--image", image, "--out", pred, "--roi", 32)
        self.assertEqual(p.returncode, 0, p.stderr)
        src, out = nib.load(image), nib.load(pred)
        self.assertEqual(out.shape[:3], src.shape[:3])
        np.testing.assert_allclose(out.affine, src.affine, atol=1e-4)
        self.assertTrue(set(np.unique(np.asanyarray(out.dataobj))) <= {0, 1})

    def test_prepare_writes_the_prefix_in_ras_at_the_configured_spacing(self):
        out = self.out("prepared")
        p = run("prepare", "--config", os.path.join(CONFIGS, "spleen.json"), "--image", self.ct_file(0, "image"),
                "--label", self.ct_file(0, "label"), "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        image, label = nib.load(os.path.join(out, "image.nii.gz")), nib.load(os.path.join(out, "label.nii.gz"))
        src = nib.load(self.ct_file(0, "image"))
        self.assertEqual(nib.aff2axcodes(src.affine)[:2], ("L", "P"))
        self.assertEqual(nib.aff2axcodes(image.affine), ("R", "A", "S"))
        np.testing.assert_allclose(image.header.get_zooms()[:3], (1.5, 1.5, 2.0), atol=1e-5)
        np.testing.assert_allclose(label.affine, image.affine)
        data = np.asanyarray(image.dataobj)
        self.assertGreaterEqual(data.min(), 0.0)
        self.assertLessEqual(data.max(), 1.0)  # the -57..164 HU window, clipped
        self.assertTrue(set(np.unique(np.asanyarray(label.dataobj))) <= {0, 1})
        self.assertGreater(np.asanyarray(label.dataobj).sum(), 0)
        stored = nib.load(self.ct_file(0, "label")).get_data_dtype()
        self.assertEqual(stored.kind, "u")
        self.assertEqual(label.get_data_dtype(), stored)  # the label's integer type, not float32
        # CropForeground: the air around the body is gone, and the world positions kept.
        src_extent = np.abs(src.affine[:3, :3] @ (np.array(src.shape[:3]) - 1)).max()
        self.assertLess(np.abs(image.affine[:3, :3] @ (np.array(image.shape[:3]) - 1)).max(), src_extent + 1)

    def oblique_ct(self):
        """An odd-sized CT-like pair on an oblique, anisotropic grid (rotated 12 degrees about z, LPS-like)."""
        rng = np.random.RandomState(5)
        hu = np.full((37, 29, 11), -1000.0)
        hu[6:31, 4:25, 1:10] = 40 + rng.randn(25, 21, 9) * 8
        label = np.zeros(hu.shape, np.uint8)
        label[14:22, 10:17, 3:8] = 1
        hu[label > 0] = 130
        c, s_ = np.cos(np.radians(12)), np.sin(np.radians(12))
        affine = np.array([[-0.7 * c, 0.9 * s_, 0, 30], [-0.7 * s_, -0.9 * c, 0, -12], [0, 0, 3.0, -40],
                           [0, 0, 0, 1]])
        paths = self.out("oblique_ct.nii.gz"), self.out("oblique_ct_seg.nii.gz")
        nib.save(nib.Nifti1Image(hu.astype(np.int16), affine), paths[0])
        nib.save(nib.Nifti1Image(label, affine), paths[1])
        return paths

    def test_the_spleen_config_equals_monais_notebook_transforms_in_their_order(self):
        # configs/spleen.json runs MONAI's spleen notebook in its order: window, crop to the foreground,
        # then Orientation and Spacing. MONAI 1.4 runs the notebook's own transforms on the same files.
        from monai.transforms import (Compose, CropForegroundd, EnsureChannelFirstd, LoadImaged, Orientationd,
                                      ScaleIntensityRanged, Spacingd)
        notebook = Compose([
            LoadImaged(keys=["image", "label"]), EnsureChannelFirstd(keys=["image", "label"]),
            ScaleIntensityRanged(keys=["image"], a_min=-57, a_max=164, b_min=0.0, b_max=1.0, clip=True),
            CropForegroundd(keys=["image", "label"], source_key="image"),
            Orientationd(keys=["image", "label"], axcodes="RAS"),
            Spacingd(keys=["image", "label"], pixdim=(1.5, 1.5, 2.0), mode=("bilinear", "nearest"))])
        cases = [(self.ct_file(i, "image"), self.ct_file(i, "label")) for i in (0, 3)] + [self.oblique_ct()]
        for k, (image, label) in enumerate(cases):
            out = self.out(f"notebook_{k}")
            p = run("prepare", "--config", os.path.join(CONFIGS, "spleen.json"), "--image", image, "--label", label,
                    "--out", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            ours_image, ours_label = nib.load(os.path.join(out, "image.nii.gz")), nib.load(os.path.join(out, "label.nii.gz"))
            theirs = notebook({"image": image, "label": label})
            want_image, want_label = np.asarray(theirs["image"])[0], np.asarray(theirs["label"])[0]
            self.assertEqual(ours_image.shape, want_image.shape, image)
            np.testing.assert_allclose(ours_image.affine, np.asarray(theirs["image"].affine), atol=1e-4,
                                       err_msg=image)
            np.testing.assert_array_equal(np.asanyarray(ours_image.dataobj), want_image, err_msg=image)
            np.testing.assert_array_equal(np.asanyarray(ours_label.dataobj), want_label, err_msg=label)
        # The other order (Orientation and Spacing first, then window and crop) is another volume.
        p = run("prepare", "--config", os.path.join(CONFIGS, "spleen.json"), "--prefix-order",
                "orientation,spacing,intensity,crop_foreground", "--image", cases[0][0], "--label", cases[0][1],
                "--out", self.out("tutorial_order"))
        self.assertEqual(p.returncode, 0, p.stderr)
        other = nib.load(os.path.join(self.out("tutorial_order"), "image.nii.gz"))
        self.assertNotEqual(other.shape, nib.load(os.path.join(self.out("notebook_0"), "image.nii.gz")).shape)

    def test_brats_config_trains_three_region_channels_and_scores_each(self):
        run_dir = self.out("brats_run")
        # The tutorial's SegResNet, small: 2 levels of 8 and 16 channels.
        small = ["--init-filters", "8", "--blocks-down", "1,1", "--blocks-up", "1"]
        p = run("train", "--config", os.path.join(CONFIGS, "brats.json"),
                "--datalist", os.path.join(self.mri, "dataset.json"), "--out", run_dir, "--epochs", 1,
                "--val-fraction", 0.25, "--roi", 16, "--nproc-per-node", 1, *TINY, *small)
        self.assertEqual(p.returncode, 0, p.stderr)
        # MONAI's SegResNet takes the weights as they are (strict), and volshard takes MONAI's.
        from monai.networks.nets import SegResNet
        net = SegResNet(spatial_dims=3, init_filters=8, in_channels=4, out_channels=3, dropout_prob=0.2,
                        blocks_down=(1, 1), blocks_up=(1,))
        state = torch.load(os.path.join(run_dir, "model.pt"))
        self.assertEqual(next(iter(state)), "convInit.conv.weight")
        net.load_state_dict(state, strict=True)
        self.assertEqual(tuple(net.eval()(torch.rand(1, 4, 16, 16, 16)).shape), (1, 3, 16, 16, 16))
        torch.save(SegResNet(spatial_dims=3, init_filters=8, in_channels=4, out_channels=3,
                             blocks_down=(1, 1), blocks_up=(1,)).state_dict(), self.out("monai_segresnet.pt"))
        from_monai = run("train", "--config", os.path.join(CONFIGS, "brats.json"), "--init-weights",
                         self.out("monai_segresnet.pt"), "--datalist", os.path.join(self.mri, "dataset.json"),
                         "--out", self.out("brats_from_monai"), "--epochs", 1, "--max-steps", 1, "--val-every", 0,
                         "--nproc-per-node", 1, *TINY, *small)
        self.assertEqual(from_monai.returncode, 0, from_monai.stderr)
        (line,) = epochs(run_dir)
        self.assertEqual(line["val_classes"], ["TC", "WT", "ET"])
        self.assertEqual(len(line["val_dice_per_class"]), 3)
        # The epoch line names each class beside the mean (not only metrics.jsonl).
        self.assertRegex(p.stdout, r"validation Dice [0-9.]+ \(TC [0-9.na]+, WT [0-9.na]+, ET [0-9.na]+\)")
        self.assertTrue(os.path.getsize(os.path.join(run_dir, "curves.png")) > 0)
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        self.assertEqual((config["in_channels"], config["model"], config["norm"]), (4, "segresnet", "group"))
        # predict builds the run's network from its config.json; --network (its --model is the weights) overrides.
        with open(os.path.join(self.mri, "dataset.json")) as f:
            image = os.path.normpath(os.path.join(self.mri, json.load(f)["training"][0]["image"]))
        pred = self.out("brats_pred.nii.gz")
        predict = ["predict", "--model", os.path.join(run_dir, "model.pt"), "--config",
                   os.path.join(run_dir, "config.json"), "--image", image, "--out", pred]
        p = run(*predict)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(nib.load(pred).shape[:3], nib.load(image).shape[:3])
        p = run(*predict, "--network", "unet", "--norm", "instance")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("UNet::load_state_dict: missing key 'model.0.", p.stderr)

    def write_list(self, name, pairs):
        path = self.out(name)
        with open(path, "w") as f:
            json.dump({"training": [{"image": i, "label": l} for i, l in pairs]}, f)
        return path

    def train_fails(self, datalist, *extra):
        p = run("train", "--config", os.path.join(CONFIGS, "spleen.json"), "--datalist", datalist,
                "--out", self.out("bad_run"), "--overwrite", "--epochs", 1, "--val-every", 0,
                "--nproc-per-node", 1, *TINY, *extra)
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out("bad_run"), "checkpoint.pt")))
        return p.stderr

    def test_bad_input_is_refused_before_training_naming_file_and_field(self):
        pairs = [(self.ct_file(i, "image"), self.ct_file(i, "label")) for i in range(3)]
        # A file the dataset.json lists is missing.
        missing = self.write_list("missing.json", pairs + [(self.out("nowhere.nii.gz"), pairs[0][1])])
        self.assertIn(self.out("nowhere.nii.gz"), self.train_fails(missing))
        # Images with different channel counts.
        src = nib.load(pairs[0][0])
        two = self.out("two_channels.nii.gz")
        data = np.asanyarray(src.dataobj)
        nib.save(nib.Nifti1Image(np.stack([data, data], -1), src.affine), two)
        err = self.train_fails(self.write_list("channels.json", pairs + [(two, pairs[0][1])]), "--in-channels", 0)
        self.assertIn(two, err)
        self.assertIn("channel", err)
        # A label value outside the classes (softmax, out_channels 2: 0 and 1).
        lab = nib.load(pairs[1][1])
        bad = np.asanyarray(lab.dataobj).copy()
        bad.flat[7] = 3
        bad_label = self.out("label_with_3.nii.gz")
        nib.save(nib.Nifti1Image(bad, lab.affine, lab.header), bad_label)
        err = self.train_fails(self.write_list("values.json", [pairs[0], (pairs[1][0], bad_label)]))
        self.assertIn(bad_label, err)
        self.assertIn("label value 3", err)
        # A voxel spacing of 0 where the affine is built from it (no sform).
        img = nib.Nifti1Image(data.astype(np.int16), None)
        img.header.set_sform(None, code=0)
        img.header.set_qform(np.diag([0.8, 0.8, 5.0, 1.0]), code=1)
        img.header["pixdim"][2] = 0
        zero = self.out("zero_spacing.nii")
        nib.save(img, zero)
        with open(zero, "rb") as f:  # nibabel fixes pixdim on save: zero it by hand
            raw = bytearray(f.read())
        raw[76 + 4 * 2:76 + 4 * 3] = np.float32(0).tobytes()  # pixdim[2]; pixdim starts at byte 76
        with open(zero, "wb") as f:
            f.write(bytes(raw))
        err = self.train_fails(self.write_list("spacing.json", [pairs[0], (zero, pairs[0][1])]))
        self.assertIn(zero, err)
        self.assertIn("pixdim[2]", err)


def available_gib():
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) / 2**20


class BratsTutorialCropTest(unittest.TestCase):
    """configs/brats.json as the tutorial sizes it (issue 42 item 1): 224 x 224 x 144 crops of four
    channels, validation windows of 240 x 240 x 160, on 256 x 256 x 160 synthetic cases; the
    SegResNet kept small (8 filters, two levels). About a minute and 7 GiB on 2 cores."""

    @unittest.skipUnless(os.path.exists("/proc/meminfo") and available_gib() >= 10,
                         "the tutorial's 224 x 224 x 144 crops need about 7 GiB free and 10 are not available")
    def test_the_tutorials_crop_trains_validates_and_predicts(self):
        root = tempfile.mkdtemp(prefix="volshard_brats224_")
        self.addCleanup(shutil.rmtree, root, ignore_errors=True)
        data, run_dir = os.path.join(root, "Task01"), os.path.join(root, "run")
        p = run("synth", "--kind", "mri", "--out", data, "--count", 3, "--size", 256, "--seed", 0)
        self.assertEqual(p.returncode, 0, p.stderr)
        trace = os.path.join(root, "trace.jsonl")
        p = run("train", "--config", os.path.join(CONFIGS, "brats.json"), "--datalist",
                os.path.join(data, "dataset.json"), "--out", run_dir, "--epochs", 1, "--val-fraction", 0.34,
                "--nproc-per-node", 1, "--init-filters", 8, "--blocks-down", "1,1", "--blocks-up", 1,
                "--num-samples", 1, "--batch-size", 1, "--workers", 1, "--threads", 2, "--sw-batch-size", 1,
                "--trace-samples", trace)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        self.assertEqual((config["crop"], config["roi"], config["crop_kind"]), ([224, 224, 144], [240, 240, 160],
                                                                                "spatial"))
        # Each crop fed was 224 x 224 x 144: its centre is its first voxel plus half of each edge.
        with open(trace) as f:
            crops = [json.loads(line) for line in f]
        self.assertEqual(len(crops), 2)
        for c in crops:
            self.assertEqual([m - s for m, s in zip(c["crop_centre"], c["crop_start"])], [112, 112, 72], c)
        (line,) = epochs(run_dir)
        self.assertEqual(len(line["val_dice_per_class"]), 3)
        with open(os.path.join(data, "dataset.json")) as f:
            image = os.path.normpath(os.path.join(data, json.load(f)["test"][0]))
        pred = os.path.join(root, "pred.nii.gz")
        p = run("predict", "--model", os.path.join(run_dir, "model.pt"), "--config", os.path.join(run_dir, "config.json"),
                "--image", image, "--out", pred)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("sliding window 240x240x160", p.stdout + p.stderr)
        self.assertEqual(nib.load(pred).shape[:3], (256, 256, 160))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--configs", required=True)
    args, rest = parser.parse_known_args()
    BINARY, CONFIGS = os.path.abspath(args.binary), os.path.abspath(args.configs)
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    # Every test skipped (BraTS's crop without the memory it needs): ctest says skipped.
    sys.exit(77 if result.testsRun and len(result.skipped) == result.testsRun else 0)
