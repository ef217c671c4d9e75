"""The report's one interval method: the median round, with the distribution-free interval
of a median.

The runner times every form in several interleaved rounds (each round times every form once,
one after another), so round ``k`` of two forms saw the machine at nearly the same moment.
Every interval a report shows comes from those rounds, the same way:

- a form's own figure (ops/s, p50, p99, mean latency, CPU per op): the median of its rounds,
  from the ``k``-th smallest to the ``k``-th largest round;
- two forms compared: the median of their per-round *ratios*, paired by round (a slow moment
  of the machine slows both), from the ``k``-th smallest to the ``k``-th largest ratio.

``k`` is the largest that keeps the coverage at :data:`COVERAGE` or more (the sign test):
2nd to 9th of 10 rounds (97.9%), 6th to 15th of 20 (95.9%). The ends are rounds' own values,
so an interval of a positive figure never runs below zero, and a round hit by a stall moves
no end unless more than ``k - 1`` rounds on that side were. With fewer than
:data:`MIN_ROUNDS` rounds even the whole range covers less than 95%: such an interval is shown
but decides nothing. The round count is fixed before the run (``--rounds``); no round is added
after looking at the data, so the coverage holds as stated.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "COVERAGE",
    "MIN_ROUNDS",
    "Interval",
    "interval_of",
    "median_cut",
    "method_text",
    "ratio_of",
]

#: the least coverage of an interval that may decide anything
COVERAGE = 0.95
#: the fewest rounds whose interval reaches :data:`COVERAGE` (the whole range of 6: 96.9%)
MIN_ROUNDS = 6


def median_cut(n: int, coverage: float = COVERAGE) -> tuple[int, float]:
    """``(k, covered)``: the interval from the ``k``-th smallest to the ``k``-th largest of
    ``n`` rounds covers their median with probability ``covered`` >= ``coverage``
    (``k = 1`` and a lower ``covered`` where ``n`` is too small for that)."""

    def covered(k: int) -> float:  # 1 - 2 P(Binomial(n, 1/2) <= k - 1)
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k < n // 2 and covered(k + 1) >= coverage:
        k += 1
    return k, covered(k) if n else 0.0


@dataclass(frozen=True)
class Interval:
    """The median of ``rounds`` values and the interval (``lo``, ``hi``) from the ``k``-th
    smallest to the ``k``-th largest of them, covering the median at ``coverage``."""

    value: float
    lo: float
    hi: float
    rounds: int
    coverage: float

    @property
    def sufficient(self) -> bool:
        """Enough rounds for the interval to decide anything (coverage >= 95%)."""
        return self.coverage >= COVERAGE

    @property
    def within_pct(self) -> float:
        """The least ``x`` (percent) such that a ratio's interval lies within
        ``[1 / (1 + x), 1 + x]``: the "+-x%" of a pair, the same either way round."""
        far = max(self.hi, 1.0 / self.lo if self.lo > 0 else math.inf)
        return 100.0 * max(far - 1.0, 0.0)

    def inverted(self) -> Interval:
        """``1 / x``: the same interval seen from the other form of a pair."""
        return Interval(_inv(self.value), _inv(self.hi), _inv(self.lo), self.rounds, self.coverage)


def _inv(x: float) -> float:
    return math.inf if x == 0 else 1.0 / x


def _known(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def interval_of(values: Sequence[float | None]) -> Interval | None:
    """The median round and its interval (unknown rounds left out); None without one."""
    xs = sorted(_known(values))
    if not xs:
        return None
    k, coverage = median_cut(len(xs))
    return Interval(statistics.median(xs), xs[k - 1], xs[-k], len(xs), coverage)


def _log_ratio(x: float | None, y: float | None) -> float | None:
    """``log(x / y)`` of one round: minus infinity where ``x`` is 0 or ``y`` infinite (the
    figure of a form that completed no call in that round: a round it lost outright), plus
    infinity the other way; None where either is unknown, negative, or both are lost."""
    if x is None or y is None:
        return None
    x, y = float(x), float(y)
    if not (x >= 0 and y >= 0) or (x == 0 and y == 0) or (math.isinf(x) and math.isinf(y)):
        return None
    if x == 0 or math.isinf(y):
        return -math.inf
    if y == 0 or math.isinf(x):
        return math.inf
    return math.log(x / y)


def ratio_of(a: Sequence[float | None], b: Sequence[float | None]) -> Interval | None:
    """``a / b`` from per-round values paired by round (rounds where either is unknown are
    left out; a round one form lost outright, its figure 0 or infinite, stays in as an
    infinite ratio, so the order statistics count it); None without a usable round. The
    median is taken of the logs, so ``ratio_of(b, a)`` is exactly the inverse of
    ``ratio_of(a, b)``."""
    logs = sorted(v for x, y in zip(a, b, strict=False) if (v := _log_ratio(x, y)) is not None)
    if not logs:
        return None
    k, coverage = median_cut(len(logs))
    mid = statistics.median(logs)
    if math.isnan(mid):  # the two middle rounds lost outright, one by each form
        mid = 0.0
    return Interval(math.exp(mid), math.exp(logs[k - 1]), math.exp(logs[-k]), len(logs), coverage)


def method_text(rounds: int) -> str:
    """The interval method, stated once per report, for ``rounds`` rounds."""
    if rounds < 2:
        return "one round only: no interval (no spread is known), nothing is decided"
    k, covered = median_cut(rounds)
    ends = "the whole range" if k == 1 else f"the {_nth(k)} smallest to the {_nth(k)} largest"
    text = (
        f"intervals are of the median of {rounds} rounds ({ends}: {covered:.1%}, "
        "distribution-free, the sign test); a ratio of two forms is the median of their "
        f"per-round ratios, paired by round; the {rounds} rounds were fixed before the run"
    )
    if covered < COVERAGE:
        text += f"; fewer than {MIN_ROUNDS} rounds cover less than 95%, so nothing is decided"
    return text


def _nth(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"
