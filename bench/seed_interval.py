"""Seed intervals for the benchmarks that train (bench/hippocampus.py and its MONAI twin): the mean
of a figure over N seeds, its sample standard deviation and a 95 % interval for the mean (Student's
t), and Welch's interval for the difference of two sides' means. How to read them:
bench/README.md, "Reading seed intervals".
"""
import math
import statistics

# Student's t, the 97.5 % quantile, for 1..30 degrees of freedom (two-sided 95 %).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]


def t975(df):
    """Student's t 97.5 % quantile for `df` degrees of freedom (a real df, as Welch's, rounds down;
    past 30 the table's last value, within 2 % of the normal's 1.96 there)."""
    if df < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, not {df}")
    return _T975[min(int(math.floor(df)), len(_T975)) - 1]


def interval(values):
    """(mean, sample standard deviation, low, high): the 95 % interval of the mean over the seeds.
    One value has no spread: sd and the interval are NaN."""
    values = list(values)
    if not values:
        raise ValueError("no values: an interval needs at least one run")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan, math.nan
    sd = statistics.stdev(values)
    half = t975(len(values) - 1) * sd / math.sqrt(len(values))
    return mean, sd, mean - half, mean + half


def difference(a, b):
    """Welch's 95 % interval for mean(a) - mean(b) (the sides' variances not assumed equal):
    (difference, low, high). Where it excludes 0 the sides differ beyond seed noise."""
    a, b = list(a), list(b)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's interval needs 2 runs a side at least, not {len(a)} and {len(b)}")
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    d = statistics.fmean(a) - statistics.fmean(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t975(df) * se
    return d, d - half, d + half


def text(values, digits=4):
    """'0.8650 +- 0.0071 (sd), 95 % interval [0.8015, 0.9285], 2 seeds' (one seed: no interval)."""
    values = list(values)
    mean, sd, lo, hi = interval(values)
    n = len(values)
    if n < 2:
        return f"{mean:.{digits}f} (1 seed: no interval)"
    return f"{mean:.{digits}f} +- {sd:.{digits}f} (sd), 95 % interval [{lo:.{digits}f}, {hi:.{digits}f}], {n} seeds"
