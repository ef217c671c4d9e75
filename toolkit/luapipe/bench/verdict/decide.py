"""The decision at one point, before it is put into words.

1. The forms at stake (:func:`~luapipe.bench.verdict.policy.at_stake`); a form at stake that
   lost updates or completed no call is ruled out, whatever its speed.
2. Every pair of the rest is compared by the point's figure at the margin
   (:func:`~luapipe.bench.verdict.compare.compare`).
3. The candidates are the forms no other is ahead of; the policy picks one of them
   (:func:`~luapipe.bench.verdict.policy.policy_key`).
4. The point is **decided** when the pick's comparison with every other form at stake is
   decided (ahead or equivalent); otherwise it is inconclusive, and the pick only stands by
   the policy until more data decides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from luapipe.bench.verdict.compare import (
    AHEAD,
    EQUIVALENT,
    INCONCLUSIVE,
    MARGIN_PCT,
    Comparison,
    Figure,
    compare,
    figure_for,
)
from luapipe.bench.verdict.policy import at_stake, kind_of, policy_key

__all__ = ["Verdict", "decide", "ruled_out"]

Row = dict[str, Any]


def ruled_out(r: Row) -> str | None:
    """Why ``r`` cannot be recommended (lost updates, no call completed), or None."""
    if r.get("invariant_ok") is False:
        lost = int(r.get("lost_updates") or 0)
        cases = int(r.get("invariant_cases") or 0)
        counted = f"in {lost} of {cases} cases" if cases else r.get("invariant_detail") or ""
        return f"{r['form']} lost updates{f' {counted}' if counted else ''}"
    if int(r.get("ops") or 0) == 0:
        return f"{r['form']} failed: every call returned an error"
    return None


@dataclass(frozen=True)
class Verdict:
    """What :func:`decide` found at one point."""

    kind: str
    at_stake: tuple[str, ...]
    figure: Figure
    margin_pct: float
    rows: tuple[Row, ...]
    ruled_out: tuple[str, ...]
    chosen: Row | None = None
    #: ``chosen`` against every other valid form at stake, the best of them first
    comparisons: tuple[Comparison, ...] = ()
    #: valid forms at stake other than ``chosen``, the best by the figure first
    others: tuple[Row, ...] = field(default=())

    @property
    def open_loop(self) -> bool:
        return any(r.get("rate") for r in self.rows)

    @property
    def decided(self) -> bool:
        """The pick's comparison with every other form at stake is decided."""
        return self.chosen is not None and all(c.decided for c in self.comparisons)

    def with_outcome(self, outcome: str) -> tuple[Comparison, ...]:
        return tuple(c for c in self.comparisons if c.outcome == outcome)

    @property
    def ahead_of(self) -> tuple[Comparison, ...]:
        return self.with_outcome(AHEAD)

    @property
    def equivalent(self) -> tuple[Comparison, ...]:
        return self.with_outcome(EQUIVALENT)

    @property
    def inconclusive(self) -> tuple[Comparison, ...]:
        return self.with_outcome(INCONCLUSIVE)

    def row(self, form: str) -> Row:
        return next(r for r in self.rows if r["form"] == form)


def decide(
    rows: Sequence[Row],
    skipped: Sequence[dict[str, str]] = (),
    margin_pct: float = MARGIN_PCT,
) -> Verdict:
    """The verdict of one point (rows: one record per form)."""
    kind, stake = at_stake(kind_of(rows), rows)
    figure = figure_for(rows)
    ruled = [why for r in rows if r["form"] in stake and (why := ruled_out(r)) is not None]
    ruled += [f"{s['form']} could not run here: {s['reason']}" for s in skipped]
    valid = [r for r in rows if r["form"] in stake and ruled_out(r) is None]
    v = Verdict(kind, stake, figure, margin_pct, tuple(rows), tuple(ruled))
    if not valid:
        return v
    behind = {
        id(b)
        for a in valid
        for b in valid
        if a is not b and compare(a, b, figure, margin_pct).outcome == AHEAD
    }
    candidates = [r for r in valid if id(r) not in behind]
    if not candidates:  # not transitive (possible with paired medians): the best stands
        candidates = [max(valid, key=figure.value)]
    chosen = min(candidates, key=policy_key)
    others = sorted((r for r in valid if r is not chosen), key=figure.value, reverse=True)
    comparisons = tuple(compare(chosen, o, figure, margin_pct) for o in others)
    return Verdict(kind, stake, figure, margin_pct, tuple(rows), tuple(ruled), chosen,
                   comparisons, tuple(others))  # fmt: skip
