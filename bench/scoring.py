"""What the training benchmarks share (bench/hippocampus.py, hippocampus_monai.py, inference_options.py):
the trainer's Decathlon split, and Dice per class summed over volumes as the trainer scores it.
"""
import json
import math
import os


def decathlon_split(data, val_fraction=0.2):
    """The trainer's Decathlon rule: the last round(val_fraction * n) cases of DATA/dataset.json's
    `training` list validate, the rest train. Returns (training, validation, foreground class names),
    the cases as {"image", "label"} with absolute, normalised paths."""
    path = os.path.join(data, "dataset.json")
    with open(path) as f:
        decathlon = json.load(f)
    cases = [{"image": os.path.normpath(os.path.join(data, c["image"])),
              "label": os.path.normpath(os.path.join(data, c["label"]))} for c in decathlon["training"]]
    n_val = round(val_fraction * len(cases))
    if not 0 < n_val < len(cases):
        raise ValueError(f"{path}: {len(cases)} training cases leave no split at val_fraction {val_fraction}")
    names = [decathlon["labels"][k] for k in sorted(decathlon["labels"], key=int) if k != "0"]
    return cases[:len(cases) - n_val], cases[len(cases) - n_val:], names


def test_fifth_split(data, val_fraction=0.2):
    """A test set held out from all tuning (issue 44 item 4): the trainer's rule still validates the
    last round(val_fraction * n) cases, and the as many cases before them are the test set, never
    trained on and never used to choose a run or an epoch; the rest train. Returns (training,
    validation, test, names), the cases as decathlon_split gives them."""
    pool, validation, names = decathlon_split(data, val_fraction)
    n_test = len(validation)
    if len(pool) <= n_test:
        raise ValueError(f"{os.path.join(data, 'dataset.json')}: {len(pool) + n_test} training cases leave "
                         f"nothing to train on after {n_test} validate and {n_test} are the test set")
    return pool[:-n_test], validation, pool[-n_test:], names


class DiceSums:
    """Foreground Dice per class summed over volumes, a NaN (the class absent from truth and
    prediction: MONAI's DiceMetric gives NaN there) left out of both the sum and the count. The
    class's mean is its sum over its count; the mean is over all (volume, class) pairs counted,
    as the trainer's val_dice."""

    def __init__(self, classes):
        self.sums = [0.0] * classes
        self.counts = [0] * classes

    def add(self, dice):
        """One volume's Dice per foreground class (any iterable of numbers, a tensor's row too)."""
        values = [float(d) for d in dice]
        if len(values) != len(self.sums):
            raise ValueError(f"{len(values)} Dice values for {len(self.sums)} classes")
        for c, d in enumerate(values):
            if not math.isnan(d):
                self.sums[c] += d
                self.counts[c] += 1

    def rows(self):
        """[sums, counts]: to sum across ranks (an all-reduce of a tensor of these) and rebuild."""
        return [list(self.sums), [float(n) for n in self.counts]]

    @classmethod
    def from_rows(cls, rows):
        s = cls(len(rows[0]))
        s.sums = [float(v) for v in rows[0]]
        s.counts = [int(round(n)) for n in rows[1]]
        return s

    def per_class(self):
        return [s / n if n else math.nan for s, n in zip(self.sums, self.counts)]

    def mean(self):
        n = sum(self.counts)
        return sum(self.sums) / n if n else math.nan
