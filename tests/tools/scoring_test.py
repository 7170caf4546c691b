#!/usr/bin/env python3
"""bench/scoring.py, what the training benchmarks share: the trainer's Decathlon split and Dice
per class summed over volumes with MONAI's NaNs (a class absent from truth and prediction) left out.

  scoring_test.py
"""
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from scoring import DiceSums, decathlon_split, test_fifth_split  # noqa: E402


class DiceSumsTest(unittest.TestCase):
    def test_a_nan_is_left_out_of_its_class_sum_and_count(self):
        s = DiceSums(2)
        s.add([0.8, math.nan])
        s.add([0.6, 0.9])
        self.assertEqual(s.per_class(), [0.7, 0.9])
        self.assertAlmostEqual(s.mean(), (0.8 + 0.6 + 0.9) / 3)  # over (volume, class) pairs, not classes

    def test_a_class_never_seen_is_nan_and_an_empty_sum_has_no_mean(self):
        s = DiceSums(2)
        self.assertTrue(math.isnan(s.mean()))
        s.add([0.5, math.nan])
        self.assertTrue(math.isnan(s.per_class()[1]))
        self.assertEqual(s.mean(), 0.5)

    def test_ranks_sum_their_rows(self):
        a, b = DiceSums(2), DiceSums(2)
        a.add([0.8, math.nan])
        b.add([0.6, 0.9])
        summed = [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a.rows(), b.rows())]
        both = DiceSums.from_rows(summed)
        self.assertEqual(both.per_class(), [0.7, 0.9])
        self.assertEqual(both.counts, [2, 1])

    def test_a_volume_with_the_wrong_number_of_classes_is_refused(self):
        with self.assertRaisesRegex(ValueError, "3 Dice values for 2 classes"):
            DiceSums(2).add([0.1, 0.2, 0.3])


class DecathlonSplitTest(unittest.TestCase):
    def write(self, d, n):
        with open(os.path.join(d, "dataset.json"), "w") as f:
            json.dump({"labels": {"0": "background", "2": "Posterior", "1": "Anterior"},
                       "training": [{"image": f"./imagesTr/c{i}.nii.gz", "label": f"./labelsTr/c{i}.nii.gz"}
                                    for i in range(n)]}, f)

    def test_the_last_fifth_validates_in_the_lists_order(self):
        with tempfile.TemporaryDirectory() as d:
            self.write(d, 12)
            training, validation, names = decathlon_split(d)
            self.assertEqual(len(training), 10)  # round(0.2 * 12) = 2 validate
            self.assertEqual([os.path.basename(c["image"]) for c in validation], ["c10.nii.gz", "c11.nii.gz"])
            self.assertEqual(validation[0]["label"], os.path.join(d, "labelsTr", "c10.nii.gz"))
            self.assertEqual(names, ["Anterior", "Posterior"])  # by label value, background left out

    def test_hippocampus_splits_208_and_52(self):
        with tempfile.TemporaryDirectory() as d:
            self.write(d, 260)
            training, validation, _ = decathlon_split(d, 0.2)
            self.assertEqual((len(training), len(validation)), (208, 52))

    def test_a_split_that_leaves_a_side_empty_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            self.write(d, 2)
            with self.assertRaisesRegex(ValueError, "dataset.json: 2 training cases leave no split"):
                decathlon_split(d, 0.2)

    def test_the_test_fifth_is_the_fifth_before_validation_and_disjoint_from_both(self):
        with tempfile.TemporaryDirectory() as d:
            self.write(d, 260)
            training, validation, test, _ = test_fifth_split(d, 0.2)
            self.assertEqual((len(training), len(validation), len(test)), (156, 52, 52))
            names = lambda cases: [os.path.basename(c["image"]) for c in cases]
            self.assertEqual(names(validation), names(decathlon_split(d, 0.2)[1]))  # tuning's split unchanged
            self.assertEqual(names(test)[0], "c156.nii.gz")
            self.assertEqual(names(test)[-1], "c207.nii.gz")
            self.assertEqual(names(training) + names(test) + names(validation), [f"c{i}.nii.gz" for i in range(260)])

    def test_a_test_fifth_that_leaves_nothing_to_train_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            self.write(d, 2)
            with self.assertRaisesRegex(ValueError, "2 training cases leave nothing to train on after 1 validate"):
                test_fifth_split(d, 0.5)


if __name__ == "__main__":
    unittest.main()
