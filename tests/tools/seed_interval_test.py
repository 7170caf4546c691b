#!/usr/bin/env python3
"""bench/seed_interval.py, the seed intervals the training benchmarks print: Student's t quantiles,
the interval of a mean and Welch's interval of a difference, against figures worked by hand.

  seed_interval_test.py
"""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import seed_interval  # noqa: E402


class SeedIntervalTest(unittest.TestCase):
    def test_t_quantiles_are_students(self):
        self.assertEqual(seed_interval.t975(1), 12.706)
        self.assertEqual(seed_interval.t975(2), 4.303)
        self.assertEqual(seed_interval.t975(4), 2.776)
        self.assertEqual(seed_interval.t975(2.9), 4.303)  # Welch's real df rounds down: wider, not narrower
        self.assertEqual(seed_interval.t975(500), 2.042)
        with self.assertRaisesRegex(ValueError, "at least 1 degree of freedom, not 0"):
            seed_interval.t975(0)

    def test_the_interval_of_two_seeds(self):
        mean, sd, lo, hi = seed_interval.interval([0.86, 0.87])
        self.assertAlmostEqual(mean, 0.865)
        self.assertAlmostEqual(sd, 0.01 / math.sqrt(2))
        half = 12.706 * (0.01 / math.sqrt(2)) / math.sqrt(2)  # = 12.706 * 0.005
        self.assertAlmostEqual(lo, 0.865 - half)
        self.assertAlmostEqual(hi, 0.865 + half)
        self.assertEqual(seed_interval.text([0.86, 0.87]),
                         "0.8650 +- 0.0071 (sd), 95 % interval [0.8015, 0.9285], 2 seeds")

    def test_one_seed_has_no_interval(self):
        mean, sd, lo, hi = seed_interval.interval([0.87])
        self.assertEqual(mean, 0.87)
        self.assertTrue(math.isnan(sd) and math.isnan(lo) and math.isnan(hi))
        self.assertEqual(seed_interval.text(iter([0.87])), "0.8700 (1 seed: no interval)")
        with self.assertRaisesRegex(ValueError, "no values"):
            seed_interval.interval([])

    def test_welchs_difference(self):
        # a: mean 2, variance 1; b: mean 1, variance 1; 3 runs each: se = sqrt(2/3), df = 4.
        d, lo, hi = seed_interval.difference([1, 2, 3], [0, 1, 2])
        self.assertAlmostEqual(d, 1.0)
        half = 2.776 * math.sqrt(2 / 3)
        self.assertAlmostEqual(lo, 1 - half)
        self.assertAlmostEqual(hi, 1 + half)
        self.assertLess(lo, 0)  # within seed noise: the interval holds 0
        d, lo, hi = seed_interval.difference([10, 10.1, 9.9], [0, 0.1, -0.1])
        self.assertGreater(lo, 0)  # beyond it
        with self.assertRaisesRegex(ValueError, "2 runs a side at least, not 1 and 3"):
            seed_interval.difference([1], [1, 2, 3])


if __name__ == "__main__":
    unittest.main()
