#!/usr/bin/env python3
"""End-to-end tests of the built `volshard` binary: synth and info, checked with nibabel."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

try:
    import nibabel as nib
    import numpy as np
except ImportError:
    print("SKIP: nibabel/numpy are not importable")
    sys.exit(77)

# The CPU's semantics, also on a machine with a GPU: the binaries started here see none
# (train_e2e.py's GpuTest runs them on the GPU).
os.environ["CUDA_VISIBLE_DEVICES"] = ""

BINARY = None


def run(*args):
    return subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True)


class VolshardToolTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="volshard_e2e_")
        self.addCleanup(shutil.rmtree, self.dir)

    def synth(self, out, *extra):
        p = run("synth", "--out", out, "--count", 3, "--size", 64, "--seed", 5, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def test_synth_writes_tutorial_like_pairs_that_nibabel_reads(self):
        out = os.path.join(self.dir, "data")
        self.synth(out)
        self.assertEqual(sorted(os.listdir(out)), ["img0.nii.gz", "img1.nii.gz", "img2.nii.gz",
                                                   "seg0.nii.gz", "seg1.nii.gz", "seg2.nii.gz"])
        for i in range(3):
            img = nib.load(os.path.join(out, "img%d.nii.gz" % i))
            seg = nib.load(os.path.join(out, "seg%d.nii.gz" % i))
            x, y = np.asanyarray(img.dataobj), np.asanyarray(seg.dataobj)
            self.assertEqual(x.shape, (64, 64, 64))
            self.assertEqual((x.dtype, y.dtype), (np.float32, np.int32))
            self.assertTrue(np.array_equal(img.affine, np.eye(4)))
            self.assertEqual((x.min(), x.max()), (0.0, 1.0))
            self.assertEqual(set(np.unique(y)), {0, 1})
            # background is exactly 0 where the label is 0 (noise-free), spheres are constant
            self.assertTrue(np.all(x[y == 0] == 0.0))
            self.assertGreater(len(np.unique(x)), 2)

    def test_synth_output_does_not_depend_on_threads_and_follows_the_seed(self):
        one, two, other = (os.path.join(self.dir, d) for d in ("one", "two", "other"))
        self.synth(one, "--threads", 1)
        self.synth(two, "--threads", 3)
        p = run("synth", "--out", other, "--count", 3, "--size", 64, "--seed", 6)
        self.assertEqual(p.returncode, 0, p.stderr)
        for name in os.listdir(one):
            self.assertEqual(Path(one, name).read_bytes(), Path(two, name).read_bytes(), name)
        a = np.asanyarray(nib.load(os.path.join(one, "seg0.nii.gz")).dataobj)
        b = np.asanyarray(nib.load(os.path.join(other, "seg0.nii.gz")).dataobj)
        self.assertFalse(np.array_equal(a, b))

    def test_info_reports_what_nibabel_reads(self):
        out = os.path.join(self.dir, "data")
        self.synth(out, "--noise", 0.1)
        files = [os.path.join(out, f) for f in ("img0.nii.gz", "seg1.nii.gz")]
        p = run("info", "--json", *files)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [json.loads(l) for l in p.stdout.splitlines()]
        self.assertEqual(len(lines), 2)
        for info, f in zip(lines, files):
            img = nib.load(f)
            x = np.asanyarray(img.dataobj).astype(np.float64)
            self.assertEqual(info["path"], f)
            self.assertEqual(info["shape"], list(x.shape))
            self.assertEqual(info["dtype"], {"float32": "float32", "int32": "int32"}[str(img.get_data_dtype())])
            self.assertEqual(info["affine"], img.affine.tolist())
            self.assertEqual(info["spacing_mm"], [float(z) for z in img.header.get_zooms()[:3]])
            self.assertEqual((info["min"], info["max"]), (x.min(), x.max()))
            self.assertAlmostEqual(info["sum"], x.sum(), delta=1e-9 * max(1.0, abs(x.sum())))
            self.assertAlmostEqual(info["mean"], x.mean(), places=9)
        text = run("info", files[0]).stdout
        self.assertIn("shape 64 x 64 x 64  float32", text)

    def test_info_lists_the_values_of_a_float32_label_and_not_of_a_float_image(self):
        # Two of the Decathlon's Hippocampus labels are stored as float32.
        label = np.zeros((6, 5, 4), np.float32)
        label[1:3, 2:4, 1:3] = 1
        label[3, 2:4, 1:3] = 2
        image = (np.arange(120, dtype=np.float32).reshape(6, 5, 4) * 0.5) + 0.25
        paths = [os.path.join(self.dir, n) for n in ("seg_float.nii.gz", "img_float.nii.gz")]
        for path, data in zip(paths, (label, image)):
            nib.save(nib.Nifti1Image(data, np.eye(4)), path)
        p = run("info", "--json", *paths)
        self.assertEqual(p.returncode, 0, p.stderr)
        seg, img = (json.loads(l) for l in p.stdout.splitlines())
        self.assertEqual(seg["labels"], [0, 1, 2])
        self.assertIsNone(img["labels"])
        self.assertIn("values 0 1 2", run("info", paths[0]).stdout)

    def test_info_names_a_bad_file_exits_one_and_still_reports_the_others(self):
        out = os.path.join(self.dir, "data")
        self.synth(out)
        bad = os.path.join(self.dir, "bad.nii.gz")
        with open(bad, "wb") as f:
            f.write(b"not a nifti file at all")
        good = os.path.join(out, "img0.nii.gz")
        p = run("info", "--json", bad, good, os.path.join(self.dir, "missing.nii"))
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stdout.splitlines()), 1)
        self.assertIn(bad, p.stderr)
        self.assertIn("missing.nii", p.stderr)

    def test_bad_arguments_exit_two(self):
        for args, needle in [(["synth", "--count", 2], "--out is required"),
                             (["synth", "--out", self.dir, "--size", 0], "--size=0"),
                             (["synth", "--out", self.dir, "--size", 64, "--rad-max", 40], "2 * rad_max=80"),
                             (["synth", "--out", self.dir, "--size", 4], "min(height, width, depth)=4"),
                             (["nonsense"], ""),
                             ([], "")]:
            p = run(*args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(needle, p.stderr, args)

    def write_config(self, values):
        path = os.path.join(self.dir, "config.json")
        with open(path, "w") as f:
            json.dump(values, f)
        return path

    def test_train_config_file_gives_the_defaults_and_flags_on_the_command_line_win(self):
        # The values are checked before any data is read, so no data is needed:
        # which value the error names tells which source won.
        config = self.write_config({"data": self.dir, "out": self.dir, "epochs": 0, "lr": 5.0})
        p = run("train", "--config", config)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--epochs=0 must be in [1, 1000000]", p.stderr)
        p = run("train", "--config", config, "--epochs", 1, "--lr", -1)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--lr=-1 must be in (0, 10]", p.stderr)
        p = run("train", "--epochs", 0, "--config", config, "--optimizer", "SGD", "--momentum", 1)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--epochs=0", p.stderr)  # flags before --config win as well

    def test_predict_and_prepare_list_only_the_options_they_use(self):
        for verb in ("predict", "prepare"):
            text = run(verb, "--help").stdout
            self.assertIn("--pixdim", text, verb)
            for training_only in ("--spatial-pad", "--normalize-on", "--epochs", "--lr"):
                self.assertNotIn(training_only, text, verb)
        self.assertIn("--spatial-pad", run("train", "--help").stdout)

    def test_version_prints_the_projects_version(self):
        p = run("--version")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"^volshard [0-9]+\.[0-9]+\.[0-9]+\n$")

    def test_an_unknown_flag_is_named_with_the_nearest_the_command_has(self):
        for args, said in ((["train", "--epoch", 2], "volshard train: unknown flag --epoch; did you mean --epochs?"),
                           (["predict", "--img", "x.nii.gz"], "volshard predict: unknown flag --img; did you mean "
                                                               "--image?"),
                           (["train", "--lr-schedul=poly"], "unknown flag --lr-schedul; did you mean --lr-schedule?")):
            p = run(*args)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(said, p.stderr)
        p = run("train", "--zzzzzzzz", 1)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("unknown flag --zzzzzzzz", p.stderr)
        self.assertNotIn("did you mean", p.stderr)

    def test_train_config_file_with_an_unknown_key_or_bad_value_is_refused_by_name(self):
        p = run("train", "--config", self.write_config({"data": self.dir, "epochz": 3}))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("unknown key 'epochz' (did you mean 'epochs'?)", p.stderr)
        p = run("train", "--config", self.write_config({"optimizer": "rmsprop"}))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("optimizer='rmsprop' must be one of adam, sgd", p.stderr)  # not CLI11's internals
        p = run("train", "--config", self.write_config({"intensity": "window"}))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("intensity='window' must be one of none, scale, range, normalize", p.stderr)
        p = run("train", "--config", self.write_config({"optimizer": "adma"}))
        self.assertIn("optimizer='adma' must be one of adam, sgd; did you mean 'adam'?", p.stderr)
        # Read as the flags take them: any case; a number where a list is; a bad value named.
        p = run("train", "--config", self.write_config({"optimizer": "ADAM", "crop": 16, "epochs": "x"}))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("epochs='x' is not a valid epochs (an integer)", p.stderr)
        p = run("train", "--data", self.dir, "--out", self.dir, "--backend", "mpi")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--backend: mpi is not one of auto, gloo, nccl", p.stderr)
        # A flag's value: the value, the choices and the nearest, never CLI11's internals (#43 item 8).
        p = run("train", "--data", self.dir, "--out", self.dir, "--activation", "softmx")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--activation: softmx is not one of sigmoid, softmax; did you mean softmax?", p.stderr)
        self.assertNotIn("FAILED", p.stderr)
        self.assertNotIn("->", p.stderr)

    def test_a_mistyped_command_names_the_word_and_the_nearest_command(self):
        for word, nearest in (("trian", "train"), ("infp", "info"), ("prdict", "predict")):
            p = run(word, "--data", self.dir)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("unknown command '%s'" % word, p.stderr)
            self.assertIn("did you mean '%s'?" % nearest, p.stderr)
        p = run("zzzzzzzz")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertNotIn("did you mean", p.stderr)

    def test_launch_and_backend_values_are_refused_whatever_the_others_are(self):
        base = ["train", "--data", self.dir, "--out", os.path.join(self.dir, "run")]
        cases = [(["--nproc-per-node", 0], "--nproc-per-node=0"),
                 (["--nproc-per-node", -1], "--nproc-per-node=-1"),
                 (["--nnodes", 0], "--nnodes=0")]
        cases.append((["--backend", "nccl"], "--backend=nccl"))  # NCCL runs between GPUs only: none is seen
        for extra, needle in cases:
            p = run(*base, *extra)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(needle, p.stderr, extra)
            self.assertFalse(os.path.exists(os.path.join(self.dir, "run")), extra)

    def test_data_and_datalist_exclude_each_other_and_the_command_line_wins_over_the_config(self):
        p = run("train", "--data", self.dir, "--datalist", "d.json", "--out", self.dir)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--data excludes --datalist", p.stderr)
        self.assertIn("one of --data and --datalist is required", run("train", "--help").stdout)
        # A run's config.json names --data; --datalist on the command line replaces it.
        config = self.write_config({"data": self.dir, "out": self.dir})
        missing = os.path.join(self.dir, "missing.json")
        p = run("train", "--config", config, "--datalist", missing)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("missing.json", p.stderr)

    def test_predict_takes_roi_as_train_does_and_roi_size_as_its_old_name(self):
        for flag in ("--roi", "--roi-size"):
            p = run("predict", "--model", "m.pt", "--image", "i.nii", "--out", "o.nii", flag, 36)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--roi 36x36x36", p.stderr, flag)  # its value checked, not refused as a flag
        self.assertIn("--roi 96", run("predict", "--help").stdout)  # the example uses the new name

    def test_predict_bounds_the_rows_it_shares_with_train_as_train_does(self):
        # predict's options are rows of one table (PredictOptions::for_each_field), the network's
        # beside the network (model.h): a bound is written once and both commands apply it.
        predict = ("predict", "--model", "m.pt", "--image", "i.nii", "--out", "o.nii")
        train = ("train", "--data", self.dir, "--out", os.path.join(self.dir, "run"))
        for extra, said in ((["--sw-batch-size", 5000], "--sw-batch-size=5000 must be in [1, 4096]"),
                            (["--num-groups", 5000], "--num-groups=5000 must be in [1, 4096]"),
                            (["--overlap", 1], "--overlap=1 must be in [0, 1)")):
            for command in (predict, train):
                p = run(*command, *extra)
                self.assertEqual(p.returncode, 2, (command[0], p.stderr))
                self.assertIn(said, p.stderr, command[0])

    def test_audit_is_python_m_volshard_audit_with_the_scripts_arguments_untouched(self):
        # The light volshard replaces itself with the configured Python running the module built
        # beside it (build/python); a --local-rank among the script's arguments reaches the script.
        self.assertIn("audit", run("--help").stdout)
        p = run("audit", "--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("python -m volshard.audit", p.stdout)
        script, seen = os.path.join(self.dir, "args.py"), os.path.join(self.dir, "seen.json")
        with open(script, "w") as f:
            f.write("import json, sys\nwith open(sys.argv[1], 'w') as f:\n    json.dump(sys.argv[2:], f)\n")
        p = run("audit", "--nproc-per-node", 1, "--reruns", 1, script, seen, "--local-rank=3", "x")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("iterated no torch DataLoader", p.stdout)
        with open(seen) as f:
            self.assertEqual(json.load(f), ["--local-rank=3", "x"])
        p = subprocess.run([BINARY, "audit", "--nproc-per-node", "1", script], capture_output=True, text=True,
                           env=dict(os.environ, VOLSHARD_PYTHON="/nonexistent/python"))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("/nonexistent/python could not be started", p.stderr)

    def test_help_synth_and_info_start_without_loading_libtorch(self):
        # The light `volshard` runs these itself; train, predict, preview and
        # repro run volshard-torch. LD_DEBUG=files lists every object loaded.
        data = os.path.join(self.dir, "data")
        self.synth(data)
        image = os.path.join(data, "img0.nii.gz")
        env = dict(os.environ, LD_DEBUG="files")

        def loaded(*args):
            p = subprocess.run([BINARY, *args], capture_output=True, text=True, env=env)
            self.assertEqual(p.returncode, 0, p.stderr[-2000:])
            return "libtorch" in p.stderr or "libc10" in p.stderr

        ct = ["synth", "--kind", "ct", "--out", os.path.join(self.dir, "ct"), "--count", "1", "--size", "16"]
        for args in (["--help"], ["info", image], ["info", "--help"], ["synth", "--help"], ct):
            self.assertFalse(loaded(*args), args)
        self.assertTrue(loaded("train", "--help"))  # what the check sees when LibTorch loads
        times = {}
        for args in (["--help"], ["info", image], ["train", "--help"]):
            runs = []
            for _ in range(5):
                start = time.perf_counter()
                subprocess.run([BINARY, *args], capture_output=True)
                runs.append(time.perf_counter() - start)
            times[" ".join(args[:1])] = sorted(runs)[2]
        print("\nstart-up, median of 5 (shared machine): " +
              ", ".join("volshard %s %.3f s" % kv for kv in times.items()))

    def test_every_train_option_has_a_flag_with_help(self):
        p = run("train", "--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        for flag in ("--in-channels", "--out-channels", "--image-glob", "--label-glob", "--overlap",
                     "--no-deterministic", "--crop", "--rot90-prob", "--config"):
            self.assertIn(flag, p.stdout)
        # Help texts read as the defaults are: no CLI11 "{false}" beside a negated flag.
        self.assertNotIn("{false}", p.stdout)
        self.assertIn("(default: on; --no-deterministic turns it off)", p.stdout)


class DecathlonSynthTest(unittest.TestCase):
    """`volshard synth --kind ct|mri`: a Medical Segmentation Decathlon folder, read as MONAI reads one."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="volshard_decathlon_")
        self.addCleanup(shutil.rmtree, self.dir)

    def synth(self, kind, name, *extra, count=3, size=32, seed=1):
        out = os.path.join(self.dir, name)
        p = run("synth", "--kind", kind, "--out", out, "--count", count, "--size", size, "--seed", seed, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        return out

    def dataset(self, out, tensor_size, modality, labels, count=3):
        """dataset.json as the Decathlon ships it; its pairs as nibabel images."""
        with open(os.path.join(out, "dataset.json")) as f:
            meta = json.load(f)
        self.assertEqual(meta["tensorImageSize"], tensor_size)
        self.assertEqual(meta["modality"], modality)
        self.assertEqual(meta["labels"], labels)
        self.assertTrue(meta["name"] and meta["description"])
        self.assertEqual((meta["numTraining"], meta["numTest"]), (count, max(1, count // 4)))
        self.assertEqual(len(meta["training"]), count)
        self.assertEqual(len(meta["test"]), meta["numTest"])
        listed = set()
        for entry in meta["training"]:
            self.assertEqual(set(entry), {"image", "label"})
            self.assertTrue(entry["image"].startswith("./imagesTr/"), entry)
            self.assertTrue(entry["label"].startswith("./labelsTr/"), entry)
            self.assertEqual(os.path.basename(entry["image"]), os.path.basename(entry["label"]))
            listed.update((entry["image"], entry["label"]))
        for path in meta["test"]:
            self.assertTrue(path.startswith("./imagesTs/") and path.endswith(".nii.gz"), path)
            listed.add(path)
        on_disk = {"./%s/%s" % (d, f) for d in ("imagesTr", "labelsTr", "imagesTs")
                   for f in os.listdir(os.path.join(out, d))}
        self.assertEqual(listed, on_disk)  # every listed file exists, nothing else was written
        pairs = [(nib.load(os.path.join(out, e["image"])), nib.load(os.path.join(out, e["label"])))
                 for e in meta["training"]]
        tests = [nib.load(os.path.join(out, p)) for p in meta["test"]]
        return pairs, tests

    def test_synth_ct_writes_a_spleen_folder_of_int16_hu_on_anisotropic_lps_grids(self):
        out = self.synth("ct", "ct")
        pairs, tests = self.dataset(out, "3D", {"0": "CT"}, {"0": "background", "1": "spleen"})
        turned = 0
        for img, seg in pairs + [(t, None) for t in tests]:
            # On disk: int16, HU = stored * 1 - 1024, as Task09's files; nibabel scales to float.
            self.assertEqual(img.get_data_dtype(), np.int16)
            self.assertEqual((img.dataobj.slope, img.dataobj.inter), (1.0, -1024.0))
            self.assertEqual(img.shape, (32, 32, 8))
            hu = np.asanyarray(img.dataobj)
            self.assertTrue(np.issubdtype(hu.dtype, np.floating), hu.dtype)
            self.assertTrue(-1024 <= hu.min() <= -990, hu.min())  # air around the body
            zooms = img.header.get_zooms()
            self.assertTrue(0.7 <= zooms[0] == zooms[1] <= 0.9, zooms)
            self.assertTrue(4.5 <= zooms[2] <= 5.5, zooms)
            a = img.affine
            self.assertTrue(a[0, 0] < 0 and a[1, 1] < 0 and a[2, 2] > 0, a)  # LPS-like, as from DICOM
            self.assertEqual(nib.aff2axcodes(a), ("L", "P", "S"))
            np.testing.assert_allclose(np.linalg.norm(a[:3, :3], axis=0), zooms, rtol=1e-6)
            turned += abs(a[0, 1]) > 1e-3
            if seg is None:
                continue
            self.assertEqual(seg.get_data_dtype(), np.uint8)
            self.assertEqual(seg.shape, img.shape)
            self.assertTrue(np.array_equal(seg.affine, img.affine))
            y = np.asanyarray(seg.dataobj)
            self.assertEqual(set(np.unique(y)), {0, 1})
            body = (hu > -500) & (y == 0)
            organ = hu[y == 1]
            self.assertTrue(80 < organ.mean() < 160, organ.mean())
            self.assertGreater(organ.mean(), hu[body].mean() + 50)
        self.assertEqual(turned, 1)  # case 1 of 0..3 is oblique, turned a few degrees about z

    def test_synth_mri_writes_four_channel_brats_images_with_nested_labels_and_zero_background(self):
        out = self.synth("mri", "mri")
        pairs, tests = self.dataset(out, "4D", {"0": "FLAIR", "1": "T1w", "2": "t1gd", "3": "T2w"},
                                    {"0": "background", "1": "edema", "2": "non-enhancing tumor",
                                     "3": "enhancing tumour"})
        for img, seg in pairs + [(t, None) for t in tests]:
            self.assertEqual(img.get_data_dtype(), np.float32)
            self.assertEqual(img.header["dim"][0], 4)
            self.assertEqual(img.shape, (32, 32, 20, 4))
            np.testing.assert_allclose(img.header.get_zooms()[:3], (1, 1, 1))
            self.assertEqual(nib.aff2axcodes(img.affine), ("R", "A", "S"))
            x = np.asanyarray(img.dataobj)
            brain = x[..., 0] != 0
            self.assertTrue(0.05 < brain.mean() < 0.6, brain.mean())
            for c in range(4):  # background exactly 0 in every channel, nonzero inside
                self.assertTrue(np.array_equal(x[..., c] != 0, brain), c)
                self.assertGreater(x[..., c][brain].min(), 0)
            if seg is None:
                continue
            self.assertEqual(seg.get_data_dtype(), np.uint8)
            self.assertEqual(seg.shape, img.shape[:3])
            self.assertTrue(np.array_equal(seg.affine, img.affine))
            y = np.asanyarray(seg.dataobj)
            self.assertEqual(set(np.unique(y)), {0, 1, 2, 3})
            self.assertFalse(np.any((y > 0) & ~brain))  # the tumour is inside the brain
            healthy = brain & (y == 0)
            mean = lambda c, where: x[..., c][where].mean()
            self.assertGreater(mean(0, y == 1), 1.5 * mean(0, healthy))  # edema bright in FLAIR
            self.assertGreater(mean(2, y == 3), 1.5 * mean(2, healthy))  # enhancing rim bright in t1gd
            self.assertGreater(mean(2, y == 3), mean(1, y == 3))  # ... brighter after gadolinium
            # The channels differ in scale, so a per-channel NormalizeIntensity matters.
            means = [mean(c, healthy) for c in range(4)]
            self.assertGreater(max(means) / min(means), 1.2, means)
        # One case in three is oblique (a few degrees about x).
        self.assertEqual(sum(abs(img.affine[1, 2]) > 1e-3 for img, _ in pairs), 1)

    def test_synth_ct_and_mri_do_not_depend_on_threads_and_follow_the_seed(self):
        for kind in ("ct", "mri"):
            one = self.synth(kind, kind + "1", "--threads", 1)
            three = self.synth(kind, kind + "3", "--threads", 3)
            other = self.synth(kind, kind + "other", seed=2)
            files = sorted(str(p.relative_to(one)) for p in Path(one).rglob("*") if p.is_file())
            self.assertEqual(len(files), 1 + 3 + 3 + 1)
            for name in files:
                self.assertEqual(Path(one, name).read_bytes(), Path(three, name).read_bytes(), (kind, name))
            self.assertNotEqual(Path(one, files[1]).read_bytes(), Path(other, files[1]).read_bytes())
        # --kind spheres is the default, byte for byte.
        a, b = os.path.join(self.dir, "a"), os.path.join(self.dir, "b")
        for out, kind in ((a, []), (b, ["--kind", "spheres"])):
            self.assertEqual(run("synth", *kind, "--out", out, "--count", 1, "--size", 24).returncode, 0)
        self.assertEqual(sorted(os.listdir(a)), ["img0.nii.gz", "seg0.nii.gz"])
        for name in os.listdir(a):
            self.assertEqual(Path(a, name).read_bytes(), Path(b, name).read_bytes())

    def test_preview_takes_a_training_config_and_a_datalist(self):
        # The CT pipeline as a config gives it (other training keys ignored) draws what its
        # flags draw, seed included; the command line wins over the file.
        out = self.synth("ct", "ct", count=2, size=48)
        datalist = os.path.join(out, "dataset.json")
        config = os.path.join(self.dir, "spleen.json")
        with open(config, "w") as f:
            json.dump({"prefix_order": ["intensity", "crop_foreground", "orientation", "spacing"],
                       "orientation": "RAS", "pixdim": [1.5, 1.5, 2.0], "intensity": "range", "a_min": -57,
                       "a_max": 164, "clip": True, "crop_foreground": True, "crop": 12, "num_samples": 2,
                       "rot90_prob": 0, "flip_prob": 0.5, "seed": 3, "lr": 1e-4, "out_channels": 2}, f)
        flags = ["--prefix-order", "intensity,crop_foreground,orientation,spacing", "--orientation", "RAS",
                 "--pixdim", "1.5,1.5,2", "--intensity", "range", "--a-min", -57, "--a-max", 164, "--clip",
                 "--crop-foreground", "--crop", 12, "--num-samples", 2, "--rot90-prob", 0, "--flip-prob", 0.5,
                 "--seed", 3]
        pictures = {}
        for name, args in [("config", ["--config", config]), ("flags", flags),
                           ("other_seed", ["--config", config, "--seed", 4]),
                           ("no_prefix", ["--crop", 12, "--num-samples", 2, "--seed", 3])]:
            png = os.path.join(self.dir, name + ".png")
            p = run("preview", "--datalist", datalist, "--count", 3, "--out", png, *args)
            self.assertEqual(p.returncode, 0, (name, p.stderr))
            self.assertIn("wrote 3 crops", p.stdout)
            with open(png, "rb") as f:
                pictures[name] = f.read()
        self.assertEqual(pictures["config"], pictures["flags"])
        self.assertNotEqual(pictures["config"], pictures["other_seed"])
        self.assertNotEqual(pictures["config"], pictures["no_prefix"])
        p = run("preview", "--config", config, "--count", 1, "--out", os.path.join(self.dir, "x.png"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("--datalist", p.stderr)
        with open(config, "w") as f:
            json.dump({"crop": 12, "num_sample": 2}, f)
        p = run("preview", "--config", config, "--datalist", datalist, "--out", os.path.join(self.dir, "x.png"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown key 'num_sample' (did you mean 'num_samples'?)", p.stderr)
        # preview's own rows: their bounds by flag; a run's "out" (its folder) is not the picture.
        p = run("preview", "--datalist", datalist, "--count", 0, "--out", os.path.join(self.dir, "x.png"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("preview: --count=0 must be in [1, 256]", p.stderr)
        with open(config, "w") as f:
            json.dump({"crop": 12, "num_samples": 1, "out": os.path.join(self.dir, "run"), "seed": 3}, f)
        png = os.path.join(self.dir, "from_run_config.png")
        p = run("preview", "--config", config, "--datalist", datalist, "--count", 1, "--out", png)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(png))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "run")))

    def test_synth_default_sizes_and_bad_kind_size_and_flags_are_named(self):
        out = self.synth("ct", "default", count=1, size=96)
        self.assertEqual(nib.load(os.path.join(out, "imagesTr", "spleen_000.nii.gz")).shape, (96, 96, 24))
        d = os.path.join(self.dir, "bad")
        for args, needles in [(["--kind", "foo"], ["--kind=foo", "spheres, ct, mri"]),
                              (["--kind", "ct", "--size", 8], ["--size=8", "[16, 512]", "--kind=ct"]),
                              (["--kind", "ct", "--size", 0], ["--size=0", "[16, 512]", "--kind=ct"]),
                              (["--kind", "mri", "--size", 16], ["--size=16", "[24, 256]", "--kind=mri"]),
                              (["--kind", "ct", "--count", 0], ["--count=0", "--kind=ct"]),
                              (["--kind", "mri", "--noise", 0.1], ["--noise", "--kind=spheres only"])]:
            p = run("synth", "--out", d, *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            for needle in needles:
                self.assertIn(needle, p.stderr, args)
        self.assertFalse(os.path.exists(d))
        help_text = run("synth", "--help").stdout
        for needle in ("--kind ct", "--kind mri", "--kind"):
            self.assertIn(needle, help_text)


def run_bytes(*args):
    """The binary's output as bytes, so that a test can check it is valid UTF-8."""
    return subprocess.run([BINARY, *[a if isinstance(a, bytes) else str(a) for a in args]], capture_output=True)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


class HostileInputTest(unittest.TestCase):
    """What a file system or a command line can hand in: FIFOs, bytes that are not UTF-8, a list flag twice."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="volshard_hostile_")
        self.addCleanup(shutil.rmtree, self.dir)

    def test_fifos_as_inputs_are_refused_not_waited_on(self):
        fifo = os.path.join(self.dir, "image.nii.gz")
        os.mkfifo(fifo)
        listing = os.path.join(self.dir, "dataset.json")
        os.mkfifo(listing)
        for args in (("info", fifo), ("train", "--datalist", listing, "--out", os.path.join(self.dir, "run"))):
            # Opening a FIFO waits for a writer: without the check this times out.
            p = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn("not a regular file (a FIFO)", p.stderr, args)

    def test_bytes_that_are_not_utf8_reach_stderr_escaped(self):
        path = os.fsencode(self.dir) + b"/caf\xe9\xff.nii.gz"  # Latin-1, as an old file system names it
        p = subprocess.run([os.fsencode(BINARY), b"info", path], capture_output=True)
        self.assertNotEqual(p.returncode, 0)
        err = p.stderr.decode("utf-8")  # strict: raw bytes would fail here
        self.assertIn("caf\\xe9\\xff.nii.gz", err)

    def test_a_list_flag_given_twice_is_refused_not_joined(self):
        p = run("train", "--data", self.dir, "--out", os.path.join(self.dir, "run"), "--channels", "4,8",
                "--channels", "16")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("train: --channels is given 2 times (4,8 and 16): give it once, its values comma-separated",
                      p.stderr)


class FrontDoorToolTest(unittest.TestCase):
    """Rough edges a new user met: small synthetic volumes, info's facts, preview, bad bytes."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="volshard_frontdoor_")
        self.addCleanup(shutil.rmtree, self.dir)

    def test_synth_scales_the_sphere_radii_below_monais_sizes(self):
        out = os.path.join(self.dir, "small")
        p = run("synth", "--out", out, "--count", 2, "--size", 32, "--seed", 0)
        self.assertEqual(p.returncode, 0, p.stderr)
        seg = np.asanyarray(nib.load(os.path.join(out, "seg0.nii.gz")).dataobj)
        self.assertEqual(seg.shape, (32, 32, 32))
        self.assertGreater(seg.sum(), 0)
        # MONAI's defaults stay at MONAI's sizes: the same bytes as with rad 30 / 5 spelled out.
        a, b = os.path.join(self.dir, "a"), os.path.join(self.dir, "b")
        run("synth", "--out", a, "--count", 1, "--size", 64, "--seed", 0)
        run("synth", "--out", b, "--count", 1, "--size", 64, "--seed", 0, "--rad-max", 30, "--rad-min", 5)
        self.assertEqual(Path(a, "seg0.nii.gz").read_bytes(), Path(b, "seg0.nii.gz").read_bytes())

    def test_info_gives_orientation_codes_as_nibabel_and_an_integer_files_values(self):
        affines = {"RAS": np.diag([2.0, 3.0, 4.0, 1.0]), "LPS": np.diag([-1.0, -1.0, 1.0, 1.0])}
        rot = np.zeros((4, 4))
        rot[0, 1], rot[1, 2], rot[2, 0], rot[3, 3] = -1.5, 1.0, -2.0, 1.0  # i -> -z, j -> -x, k -> y
        affines["other"] = rot
        sheared = np.eye(4)  # the closest rotation decides: nibabel says LIP, a per-column guess PLI
        sheared[:3, :3] = [[-1.265, -0.623, 0.041], [-2.325, -0.219, -1.246], [-0.732, -0.544, -0.316]]
        affines["sheared"] = sheared
        for name, affine in affines.items():
            path = os.path.join(self.dir, name + ".nii.gz")
            data = np.zeros((6, 5, 4), np.int16)
            data[1:3, 1:3, 1:3] = 7
            data[0, 0, 0] = -3
            nib.save(nib.Nifti1Image(data, affine), path)
            p = run("info", "--json", path)
            self.assertEqual(p.returncode, 0, p.stderr)
            info = json.loads(p.stdout)
            self.assertEqual(info["orientation"], "".join(nib.aff2axcodes(nib.load(path).affine)), name)
            self.assertEqual(info["labels"], [-3, 0, 7])
            self.assertTrue(info["labels_complete"])
            self.assertIn("values -3 0 7", run("info", path).stdout)
        img = os.path.join(self.dir, "float.nii.gz")
        nib.save(nib.Nifti1Image(np.full((4, 4, 4), 0.5, np.float32), np.eye(4)), img)
        self.assertIsNone(json.loads(run("info", "--json", img).stdout)["labels"])

    def test_preview_draws_every_channel_or_the_chosen_one(self):
        data = os.path.join(self.dir, "data")
        os.makedirs(data)
        rng = np.random.RandomState(0)
        for i in range(2):
            nib.save(nib.Nifti1Image(rng.rand(24, 24, 24, 2).astype(np.float32), np.eye(4)),
                     os.path.join(data, "img%d.nii.gz" % i))
            seg = np.zeros((24, 24, 24), np.uint8)
            seg[8:16, 8:16, 8:16] = 1
            nib.save(nib.Nifti1Image(seg, np.eye(4)), os.path.join(data, "seg%d.nii.gz" % i))
        every, one = os.path.join(self.dir, "every.png"), os.path.join(self.dir, "one.png")
        common = ["--data", data, "--count", 2, "--crop", 16, "--num-samples", 1]
        self.assertEqual(run("preview", *common, "--out", every).returncode, 0)
        p = run("preview", *common, "--out", one, "--channel", 1)
        self.assertEqual(p.returncode, 0, p.stderr)
        (we, he), (wo, ho) = png_size(every), png_size(one)
        self.assertEqual(we, 4 * 192)  # one crop a row: 2 channels x (axial, coronal)
        self.assertEqual(wo, 4 * 192)  # two crops a row: 1 channel x (axial, coronal)
        self.assertEqual(he, 2 * ho)
        p = run("preview", *common, "--out", one, "--channel", 2)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--channel=2", p.stderr)
        self.assertIn("2 channel(s)", p.stderr)

    def test_bad_bytes_in_files_and_paths_give_valid_utf8_messages(self):
        good = os.path.join(self.dir, "good.nii")
        nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.float32), np.eye(4)), good)
        raw = bytearray(Path(good).read_bytes())
        bad = os.path.join(self.dir, "bad_magic.nii")
        raw[344:348] = b"\xff\xfe\n\x00"
        Path(bad).write_bytes(bytes(raw))
        p = run_bytes("info", bad)
        self.assertEqual(p.returncode, 1)
        err = p.stderr.decode("utf-8")  # strict: raises on invalid UTF-8
        self.assertIn('magic="\\xff\\xfe\\x0a"', err)
        # A path that is not UTF-8: --json still prints, escaping it.
        odd = os.path.join(os.fsencode(self.dir), b"img\xff.nii")
        with open(odd, "wb") as f:
            f.write(Path(good).read_bytes())
        p = run_bytes("info", "--json", odd)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(json.loads(p.stdout.decode("utf-8"))["path"].endswith("img\\xff.nii"))
        # Analyze 7.5: sizeof_hdr 348, no magic.
        analyze = os.path.join(self.dir, "analyze.hdr")
        raw[344:348] = b"\x00\x00\x00\x00"
        Path(analyze).write_bytes(bytes(raw[:348]))
        p = run("info", analyze)
        self.assertIn("Analyze 7.5", p.stderr)
        # Every truncated gzip, the 10-byte header-only one included, is called that.
        gz = os.path.join(self.dir, "good.nii.gz")
        nib.save(nib.Nifti1Image(np.arange(32 ** 3, dtype=np.float32).reshape(32, 32, 32), np.eye(4)), gz)
        whole = Path(gz).read_bytes()
        for cut in (10, 20, 200, len(whole) // 2, len(whole) - 9):
            path = os.path.join(self.dir, "cut%d.nii.gz" % cut)
            Path(path).write_bytes(whole[:cut])
            p = run("info", path)
            self.assertEqual(p.returncode, 1, cut)
            self.assertIn("truncated gzip stream", p.stderr, cut)

    def test_diff_says_bad_fingerprints_are_bad_input_naming_the_file_and_line(self):
        # Issue 43 item 18: each was a crash (SIGSEGV), a hang, "the runs are the same" or exit 1.
        step = {"type": "step", "step": 1, "epoch": 0, "world": 1, "indices": "0a", "augmentation": "0b",
                "bytes": "0c", "loss": 0.5, "grads": ["aa"], "weights": ["bb"]}
        layout = json.dumps({"type": "layout", "buckets": [["w"]]})
        second = json.dumps(dict(step, step=2))

        def folder(name, *lines):
            d = os.path.join(self.dir, name)
            os.makedirs(d)
            Path(d, "config.json").write_text("{}\n")
            Path(d, "fingerprints.jsonl").write_text("".join(line + "\n" for line in lines))
            return d

        good = folder("good", layout, json.dumps(step), second)

        def diff(run_a):
            return subprocess.run([BINARY, "diff", run_a, good], capture_output=True, text=True, timeout=60)

        self.assertEqual(diff(folder("same", layout, json.dumps(step), second)).returncode, 0)
        deep = json.dumps(step).replace('["aa"]', "[" * 100000 + "]" * 100000)
        for name, line, needle in [
                ("deep", deep, "fingerprints.jsonl:2: nested deeper than 64 levels"),
                ("negative", json.dumps(dict(step, step=-5)),
                 'fingerprints.jsonl:2: "step" must be a whole number from 1, not -5'),
                ("huge", json.dumps(step).replace('"step": 1,', '"step": 1e300,'),
                 'fingerprints.jsonl:2: "step" must be a whole number from 1, not 1e+300'),
                ("typed", json.dumps(dict(step, world="two")),
                 'fingerprints.jsonl:2: "world" must be a whole number from 1, not "two"')]:
            p = diff(folder(name, layout, line, second))
            self.assertEqual(p.returncode, 2, (name, p.stdout, p.stderr))
            self.assertIn(needle, p.stderr, name)
        # A FIFO, /dev/zero and a directory are refused at once, not read or waited on.
        for name, make in [("fifo", os.mkfifo), ("zero", lambda path: os.symlink("/dev/zero", path)),
                           ("directory", os.mkdir)]:
            d = folder(name, layout)
            os.remove(os.path.join(d, "fingerprints.jsonl"))
            make(os.path.join(d, "fingerprints.jsonl"))
            p = diff(d)
            self.assertEqual(p.returncode, 2, (name, p.stderr))
            self.assertIn("fingerprints.jsonl: not a regular file", p.stderr, name)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args, rest = ap.parse_known_args()
    BINARY = args.binary
    unittest.main(argv=[sys.argv[0], "-v", *rest])
