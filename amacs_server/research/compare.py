"""Arms compared: the difference of their means, its 95% interval, and whether n is enough to tell.

The interval is a seeded bootstrap of the difference (each arm resampled with replacement, on its
own); the p-value a permutation test of the same difference, exact when the arms' labellings are
few enough to count, else seeded.  Below :data:`MIN_N` runs in an arm the comparison says plainly
that it cannot tell: a bootstrap of two or three values gives an interval far too narrow.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

MIN_N = 5  # runs per arm below which a comparison says it cannot tell
RESAMPLES = 5000  # bootstrap resamples of the difference
EXACT_UP_TO = 20000  # labellings counted one by one up to this many; above, as many drawn at random


@dataclass(frozen=True)
class Difference:
    """ARM's mean minus the REFERENCE arm's, with its 95% interval and p-value (None: too few runs)."""

    n_reference: int
    n_arm: int
    mean_reference: float
    mean_arm: float
    difference: float
    low: float | None
    high: float | None
    p: float | None
    exact: bool  # the p-value counted every labelling

    @property
    def enough(self) -> bool:
        """Whether each arm has the runs a comparison needs (:data:`MIN_N`)."""
        return self.low is not None

    def words(self, unit: str = "") -> str:
        """What the comparison says, plainly."""
        if not self.enough:
            return (f"too few runs to tell (n = {self.n_reference} and {self.n_arm}; "
                    f"at least {MIN_N} per arm are needed for an interval)")
        assert self.low is not None and self.high is not None and self.p is not None
        if self.low == self.high == self.difference == 0:  # the interval of one value: every run's
            return f"no difference: every run of both arms had the same value ({self.mean_arm:.3g}{unit})"
        span = f"95% interval {self.low:+.3g} to {self.high:+.3g}{unit}, p = {self.p:.3g}"
        if self.low > 0 or self.high < 0:
            return f"{'higher' if self.difference > 0 else 'lower'} by {abs(self.difference):.3g}{unit} ({span})"
        return f"no difference shown: the interval includes 0 ({span})"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def bootstrap_difference(reference: list[float], arm: list[float], seed: int = 0,
                         resamples: int = RESAMPLES) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of mean(ARM) - mean(REFERENCE) over RESAMPLES seeded
    resamples, each arm resampled with replacement on its own."""
    rng = random.Random(seed)
    na, nb = len(reference), len(arm)
    diffs = sorted(sum(rng.choices(arm, k=nb)) / nb - sum(rng.choices(reference, k=na)) / na
                   for _ in range(resamples))
    return diffs[int(0.025 * (resamples - 1))], diffs[int(round(0.975 * (resamples - 1)))]


def permutation_p(reference: list[float], arm: list[float], seed: int = 0) -> tuple[float, bool]:
    """The two-sided p-value of the difference of means under random labelling, and whether it is
    exact (every labelling counted) or drawn (:data:`EXACT_UP_TO` seeded labellings)."""
    pooled = reference + arm
    n, k = len(pooled), len(arm)
    total = sum(pooled)
    observed = abs(_mean(arm) - _mean(reference))
    tolerance = 1e-12 * max(1.0, abs(total))

    def extreme(chosen_sum: float) -> bool:
        diff = chosen_sum / k - (total - chosen_sum) / (n - k)
        return abs(diff) >= observed - tolerance

    if math.comb(n, k) <= EXACT_UP_TO:
        hits = count = 0
        for chosen in itertools.combinations(range(n), k):
            count += 1
            hits += extreme(sum(pooled[i] for i in chosen))
        return hits / count, True
    rng = random.Random(seed)
    hits = sum(extreme(sum(rng.sample(pooled, k))) for _ in range(EXACT_UP_TO))
    return (hits + 1) / (EXACT_UP_TO + 1), False


def difference(reference: list[float], arm: list[float], seed: int = 0) -> Difference:
    """ARM compared with REFERENCE (each a list of one value per run)."""
    if not reference or not arm:
        raise ValueError("an arm with no values")
    diff = _mean(arm) - _mean(reference)
    if min(len(reference), len(arm)) < MIN_N:
        return Difference(len(reference), len(arm), _mean(reference), _mean(arm), diff, None, None, None, False)
    low, high = bootstrap_difference(reference, arm, seed)
    p, exact = permutation_p(reference, arm, seed)
    return Difference(len(reference), len(arm), _mean(reference), _mean(arm), diff, low, high, p, exact)
