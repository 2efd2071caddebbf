"""The registered-protocol statistics of the studies, each named by what it is.

- `t_interval`: the mean and the half-width of Student's t 95% interval over units (seeds,
  cells, pairs of runs); `minimum_detectable`: the minimum detectable effect (MDE) of a
  paired t test at 80% power and a two-sided 5% level, optionally projected to n units;
  `seeds_needed`: the fewest units that bring the projected MDE within a target.
- `wilson_interval` (a proportion, e.g. a match score over n games), `normal_interval`
  (mean +- z sd / sqrt(N) of per-game scores) and `elo_difference` (400 log10(s / (1 - s)))
  are the package's (`mmc_jax.evaluation.elo`), the ones `evaluate` reports; they are here
  so that a study names the interval it registered and never writes its own.
"""

from __future__ import annotations

import math

from mmc_jax.evaluation.elo import elo_difference, normal_interval, wilson_interval

__all__ = [
    "elo_difference",
    "minimum_detectable",
    "normal_interval",
    "seeds_needed",
    "standard_deviation",
    "t_interval",
    "wilson_interval",
]


def standard_deviation(values: list[float]) -> float:
    """The sample standard deviation (n - 1 in the denominator) of at least two values."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def t_interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of Student's t 95% interval (0 for a single value)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    sd = standard_deviation(values)
    return mean, float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def minimum_detectable(values: list[float], n: int | None = None) -> float | None:
    """The smallest true mean difference a paired t test over these units detects with 80%
    power at a two-sided 5% level: (t_0.975 + t_0.8) x sd / sqrt(n), sd from the units; with
    `n`, projected to n units of the same sd (the MDE a design of n seeds would have). None
    below 3 units."""
    from scipy import stats

    if len(values) < 3:
        return None
    sd = standard_deviation(values)
    n = len(values) if n is None else n
    return float(stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)


def seeds_needed(diffs: list[float], target: float, cap: int) -> int:
    """The fewest seeds n (at least len(diffs), at most `cap`) at which the MDE projected from
    these per-seed differences' SD is at most `target`; `cap` when no n up to it is."""
    for n in range(len(diffs), cap + 1):
        if minimum_detectable(diffs, n) <= target:
            return n
    return cap
