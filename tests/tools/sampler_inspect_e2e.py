#!/usr/bin/env python3
"""End-to-end tests of the built sampler-inspect binary (standard library only)."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

BINARY = None


def run(*args):
    return subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True)


def fnv1a64(indices):
    h = 0xcbf29ce484222325
    for v in indices:
        for b in int(v).to_bytes(8, "little", signed=True):
            h = ((h ^ b) * 0x100000001b3) % 2**64
    return "%016x" % h


def read_png(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB PNG, standard library only."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert (depth, colour) == (8, 2), (depth, colour)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * 3, [], bytearray(width * 3)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b, c = prev[i], (prev[i - 3] if i >= 3 else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, 3)])
        prev = line
    return width, height, rows


class SamplerInspectTest(unittest.TestCase):
    def test_help_has_examples_and_exits_zero(self):
        p = run("--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("Examples:", p.stdout)
        self.assertIn("--verify", p.stdout)

    def test_an_unknown_flag_is_named_with_the_nearest(self):
        p = run("--szie", "21", "--world-size", "2")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("sampler-inspect: unknown flag --szie; did you mean --size?", p.stderr)

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

    def write_state(self, **fields):
        state = {"version": 1, "seed": 0, "epoch": 3, "mode": "pad", "shuffle": True, "randperm": "torch2",
                 "dataset_size": 21, "world_size": 2, "consumed": 10}
        state.update(fields)
        fd, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        self.addCleanup(os.remove, path)
        return path

    def test_state_shows_the_rest_of_the_epoch_at_the_saved_world_size(self):
        full = json.loads(run("--size", 21, "--world-size", 2, "--epoch", 3, "--format", "json").stdout)
        # 10 consumed at W=2: each rank read its first 5.
        p = run("--state", self.write_state(), "--format", "json", "--verify")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual(doc["epochs"][0]["consumed_before"], 10)
        for before, after in zip(full["epochs"][0]["ranks"], doc["epochs"][0]["ranks"]):
            self.assertEqual(after["indices"], before["indices"][5:])
        self.assertIn("verify epoch 3: OK", p.stderr)

    def test_resume_world_size_resplits_without_duplicates_or_omissions(self):
        path = self.write_state(mode="uneven", consumed=8)
        full = json.loads(run("--size", 21, "--world-size", 2, "--epoch", 3, "--mode", "uneven",
                              "--format", "json").stdout)
        before = [i for r in full["epochs"][0]["ranks"] for i in r["indices"][:4]]
        for w in (1, 3, 5):
            p = run("--state", path, "--resume-world-size", w, "--format", "json", "--verify")
            self.assertEqual(p.returncode, 0, p.stderr)
            ranks = json.loads(p.stdout)["epochs"][0]["ranks"]
            self.assertEqual(len(ranks), w)
            after = [i for r in ranks for i in r["indices"]]
            self.assertEqual(sorted(before + after), list(range(21)), w)
            self.assertIn("every sample exactly once", p.stderr)
        table = run("--state", path, "--resume-world-size", 3).stdout
        self.assertIn("8 of 21 samples consumed at world_size=2; the rest split over 3 ranks", table)

    def test_bad_state_files_exit_two_naming_the_file_and_field(self):
        p = run("--state", "/nonexistent/state.json")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--state=/nonexistent/state.json: cannot open", p.stderr)
        p = run("--state", self.write_state(consumed=22))
        self.assertEqual(p.returncode, 2)
        self.assertIn("field 'consumed'=22 must be <= dataset_size=21", p.stderr)
        p = run("--state", self.write_state(), "--size", 5)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--size excludes --state", p.stderr)

    def test_seeds_are_printed_per_rank_and_per_sample(self):
        doc = json.loads(run("--size", 12, "--world-size", 2, "--epochs", "0:1", "--seeds", "--format", "json").stdout)
        for epoch in doc["epochs"]:
            self.assertEqual(epoch["permutation_seed"], epoch["epoch"])
            seeds = {}
            for r in epoch["ranks"]:
                self.assertEqual(len(r["sample_seeds"]), len(r["indices"]))
                seeds.update(zip(r["indices"], r["sample_seeds"]))
            # the sample seed follows the index, whichever rank reads it
            other = json.loads(run("--size", 12, "--world-size", 3, "--epoch", epoch["epoch"], "--seeds",
                                   "--format", "json").stdout)
            for r in other["epochs"][0]["ranks"]:
                for i, s in zip(r["indices"], r["sample_seeds"]):
                    self.assertEqual(seeds[i], s)
        rank_seeds = [r["rank_seed"] for r in doc["epochs"][0]["ranks"]]
        self.assertNotEqual(rank_seeds[0], rank_seeds[1])
        self.assertIn("rank seed", run("--size", 12, "--world-size", 2, "--seeds").stdout)

    def test_png_draws_one_row_per_epoch_and_one_cell_per_sample_coloured_by_rank(self):
        fd, path = tempfile.mkstemp(suffix=".png")
        os.close(fd)
        self.addCleanup(os.remove, path)
        p = run("--size", 37, "--world-size", 4, "--epochs", "0:3", "--png", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        width, height, rows = read_png(path)
        cell, label, legend, row_h = 28, 80, 30, 26  # png.cpp's layout for n = 37
        self.assertEqual((width, height), (label + 37 * cell + 6, legend + 4 * row_h + 6))
        doc = json.loads(run("--size", 37, "--world-size", 4, "--epochs", "0:3", "--format", "json").stdout)
        for e, epoch in enumerate(doc["epochs"]):
            owner, reads = {}, {}
            for r in reversed(epoch["ranks"]):
                for i in r["indices"]:
                    owner[i] = r["rank"]
                    reads[i] = reads.get(i, 0) + 1
            y = legend + e * row_h + 5
            colour_of_rank = {}
            for i in range(37):
                px = rows[y][label + i * cell + 3]
                self.assertNotEqual(px, (255, 255, 255))
                colour_of_rank.setdefault(owner[i], px)
                self.assertEqual(px, colour_of_rank[owner[i]], (e, i))  # one colour per rank
                centre = rows[legend + e * row_h + row_h // 2][label + i * cell + (cell - 1) // 2]
                self.assertEqual(centre == (255, 255, 255), reads[i] > 1, (e, i))  # padding dot
            self.assertEqual(len(set(colour_of_rank.values())), 4)

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
