"""Intervals across rounds, and when one form really beats another.

The runner times every form in several interleaved rounds (ABAB...), so round ``k`` of two
forms saw the same machine at nearly the same moment. A form's own figure gets a 95%
Student-t interval over its per-round values (:func:`mean_interval`).

Two forms are compared by their per-round *ratios*, paired by round (a slow moment of the
machine slows both). On a shared machine a round can be hit by a stall that only one of
the two forms lived through; a Student-t interval of the mean is dragged by such a round in
either direction (it can call a difference that is not there, or hide one that is). So the
ratio is the *median* of the per-round ratios, with the distribution-free interval of a
median: from the ``k``-th smallest to the ``k``-th largest round, ``k`` the largest that
keeps the coverage at 95% or more (the sign test). In words, at 10 rounds: a form beats
another only when it was ahead by more than the noise threshold (:data:`NOISE_PCT`) in at
least 9 of the 10 rounds; one disturbed round on each side cannot flip the verdict. Up to
8 rounds the interval is the whole range of rounds (it covers ``1 - 2 / 2**n``: 94% at 5
rounds, 97% at 6).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["NOISE_PCT", "Ratio", "mean_interval", "median_cut", "ratio_of", "t975"]

#: a form beats another only if the 95% interval of their ratio clears +-5%
NOISE_PCT = 5.0

_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (df >= 1)."""
    if df <= len(_T975):
        return _T975[df - 1]
    return 1.96 + 2.4 / df  # within 1% of the exact value from df 11 on


def mean_interval(values: Sequence[float | None]) -> tuple[float, float] | None:
    """95% interval of the mean of ``values`` (None: fewer than 2 known values), floored at 0."""
    xs = [float(v) for v in values if v is not None]
    if len(xs) < 2:
        return None
    m, s = statistics.fmean(xs), statistics.stdev(xs)
    half = t975(len(xs) - 1) * s / math.sqrt(len(xs))
    return (max(0.0, m - half), m + half)  # every figure here is >= 0


def median_cut(n: int, coverage: float = 0.95) -> tuple[int, float]:
    """``(k, covered)``: the interval from the ``k``-th smallest to the ``k``-th largest of
    ``n`` paired rounds covers their median with probability ``covered`` >= ``coverage``
    (``k = 1`` and a lower ``covered`` where ``n`` is too small for that)."""

    def covered(k: int) -> float:  # 1 - 2 P(Binomial(n, 1/2) <= k - 1)
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k < n // 2 and covered(k + 1) >= coverage:
        k += 1
    return k, covered(k)


@dataclass(frozen=True)
class Ratio:
    """``a / b`` over paired rounds: the median round's ratio and the interval (``lo``,
    ``hi``) from the ``k``-th smallest to the ``k``-th largest round, at ``coverage``."""

    value: float
    lo: float
    hi: float
    rounds: int
    coverage: float = 0.95

    def beats(self, noise_pct: float = NOISE_PCT) -> bool:
        """``a`` is better than ``b`` beyond noise (for a figure where more is better)."""
        return self.lo > 1.0 + noise_pct / 100.0

    def loses(self, noise_pct: float = NOISE_PCT) -> bool:
        return self.hi < 1.0 / (1.0 + noise_pct / 100.0)

    @property
    def within_pct(self) -> float:
        """How far from 1 the interval reaches, in percent (the "+-x%" of a tie)."""
        return 100.0 * max(self.hi - 1.0, 1.0 - self.lo, 0.0)


def ratio_of(a: Sequence[float | None], b: Sequence[float | None]) -> Ratio | None:
    """``a / b`` from per-round values, paired by round (rounds where either is unknown or
    not positive are left out); None without a usable round. With one round the interval
    is that round's ratio alone (no spread is known: it cannot clear the threshold unless
    the ratio does)."""
    logs = [
        math.log(float(x) / float(y))
        for x, y in zip(a, b, strict=False)
        if x is not None and y is not None and x > 0 and y > 0
    ]
    if not logs:
        return None
    logs.sort()
    k, coverage = median_cut(len(logs))
    mid = statistics.median(logs)
    return Ratio(math.exp(mid), math.exp(logs[k - 1]), math.exp(logs[-k]), len(logs), coverage)
