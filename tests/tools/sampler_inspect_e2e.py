#!/usr/bin/env python3
"""End-to-end tests of the built sampler-inspect binary (standard library only)."""
import argparse
import json
import subprocess
import sys
import unittest

BINARY = None


def run(*args):
    return subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True)


def fnv1a64(indices):
    h = 0xcbf29ce484222325
    for v in indices:
        for b in int(v).to_bytes(8, "little", signed=True):
            h = ((h ^ b) * 0x100000001b3) % 2**64
    return "%016x" % h


class SamplerInspectTest(unittest.TestCase):
    def test_help_has_examples_and_exits_zero(self):
        p = run("--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("Examples:", p.stdout)
        self.assertIn("--verify", p.stdout)

    def test_table_shows_shards_batches_and_moves_per_epoch(self):
        p = run("--size", 21, "--world-size", 2, "--epochs", "0:2", "--batch-size", 5)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        self.assertIn("total_size=22 samples/rank=11", out)
        self.assertIn("steps/epoch=3", out)
        for e in range(3):
            self.assertIn("epoch %d" % e, out)
        self.assertEqual(out.count("3 batches:"), 6)
        self.assertIn("samples changed rank since epoch 1", out)
        # the documented example: n=10, W=4, epoch 1
        p = run("--size", 10, "--world-size", 4, "--epoch", 1)
        self.assertIn("rank  0    3 samples: 5 0 7", p.stdout)
        self.assertIn("rank  3    3 samples: 2 3 6", p.stdout)

    def test_long_shards_are_elided_in_the_middle(self):
        p = run("--size", 1000, "--world-size", 2)
        self.assertRegex(p.stdout, r"\.\.\. \(484 more\) \.\.\.")

    def test_json_has_the_documented_shape_and_rank_filter(self):
        p = run("--size", 10, "--world-size", 4, "--epochs", "0:1", "--format", "json", "--rank", 2)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual(list(doc.keys()), ["size", "world_size", "seed", "shuffle", "mode", "epochs"])
        self.assertEqual([e["epoch"] for e in doc["epochs"]], [0, 1])
        self.assertEqual(doc["epochs"][0]["ranks"], [{"rank": 2, "num_samples": 3, "indices": [7, 0, 4]}])
        self.assertEqual(doc["epochs"][1]["ranks"][0]["indices"], [1, 9, 5])

    def test_csv_lists_every_position(self):
        p = run("--size", 5, "--world-size", 2, "--no-shuffle", "--mode", "uneven", "--format", "csv")
        self.assertEqual(p.stdout.splitlines(), ["epoch,rank,position,index", "0,0,0,0", "0,0,1,2", "0,0,2,4",
                                                 "0,1,0,1", "0,1,1,3"])

    def test_summary_fingerprint_is_fnv1a_of_the_indices(self):
        js = json.loads(run("--size", 1000, "--world-size", 3, "--seed", 7, "--format", "json").stdout)
        summary = run("--size", 1000, "--world-size", 3, "--seed", 7, "--format", "summary").stdout
        for r in js["epochs"][0]["ranks"]:
            self.assertIn("rank %d  num_samples=%d" % (r["rank"], r["num_samples"]), summary)
            self.assertIn("fingerprint=" + fnv1a64(r["indices"]), summary)

    def test_verify_prints_one_verdict_per_epoch(self):
        for mode in ("pad", "drop_last", "uneven"):
            p = run("--size", 103, "--world-size", 8, "--epochs", "3:6", "--mode", mode, "--verify")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(p.stdout.count("verify epoch"), 4)
            self.assertEqual(p.stdout.count(": OK"), 4)
        p = run("--size", 103, "--world-size", 8, "--epochs", "0:1", "--verify", "--format", "json")
        self.assertEqual(p.returncode, 0)
        json.loads(p.stdout)  # verdicts went to stderr
        self.assertEqual(p.stderr.count("verify epoch"), 2)

    def test_verify_exits_one_when_an_epoch_repeats_the_previous_order(self):
        # For n = 8, seeds 54476 and 54477 give the same permutation (PyTorch too).
        p = run("--size", 8, "--world-size", 2, "--seed", 54476, "--epochs", "0:1", "--verify")
        self.assertEqual(p.returncode, 1)
        self.assertIn("verify epoch 1: FAIL: order identical to the previous epoch", p.stdout)

    def test_bad_arguments_exit_two_naming_the_flag_and_value(self):
        cases = [
            (["--size", -1, "--world-size", 2], "--size=-1"),
            (["--size", "abc", "--world-size", 2], "--size = abc"),
            (["--size", 5, "--world-size", 0], "--world-size=0"),
            (["--size", 5, "--world-size", 2, "--rank", 2], "--rank=2"),
            (["--size", 5, "--world-size", 2, "--mode", "even"], "--mode: even"),
            (["--size", 5, "--world-size", 2, "--epochs", "2:1"], "--epochs=2:1"),
            (["--size", 5, "--world-size", 2, "--format", "xml"], "--format: xml"),
            (["--size", 5, "--world-size", 2, "--batch-size", 0], "--batch-size=0"),
            (["--world-size", 2], "--size is required"),
            (["--size", 3, "--world-size", 4, "--mode", "uneven"], "dataset_size=3 >= num_replicas=4"),
        ]
        for args, needle in cases:
            p = run(*args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(needle, p.stderr, args)
            self.assertEqual(p.stdout, "", args)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args, rest = ap.parse_known_args()
    BINARY = args.binary
    unittest.main(argv=[sys.argv[0], "-v", *rest])
