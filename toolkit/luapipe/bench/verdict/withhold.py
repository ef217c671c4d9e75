"""Recommendations for a results dict, withheld where a form has too few samples.

:func:`~luapipe.bench.verdict.recommend.recommend` decides each point; with a handful of calls
(a very short run, or an open loop at a low ``--rate``) that pick is noise. A point where
any form finished fewer than :data:`MIN_CALLS` timed calls gets no form, and says so.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from luapipe.bench.verdict.compare import MARGIN_PCT
from luapipe.bench.verdict.reasons import where
from luapipe.bench.verdict.recommend import point_of, recommend

__all__ = ["MIN_CALLS", "recommendations"]

#: fewer timed calls than this (successful or failed) and a form's figures are not compared
MIN_CALLS = 20


def _attempts(record: dict[str, Any]) -> int:
    calls = record.get("calls")
    if calls is None:  # an older results file: ops / batch
        calls = int(record.get("ops", 0)) // max(1, int(record.get("batch") or 1))
    return int(calls) + int(record.get("errors", 0))


def recommendations(
    records: list[dict[str, Any]],
    skipped: list[dict[str, str]] | None = None,
    *,
    margin_pct: float = MARGIN_PCT,
) -> list[dict[str, Any]]:
    """``recommend(records, skipped)`` as dicts, with "too few samples" where it applies."""
    thin: dict[tuple[str, float, int, str], list[str]] = defaultdict(list)
    for r in records:
        n = _attempts(r)
        if n < MIN_CALLS:
            thin[point_of(r)].append(f"{r['form']} completed {n} call{'' if n == 1 else 's'}")
    out = []
    for rec in recommend(records, skipped, margin_pct=margin_pct):
        few = thin.get((rec.operation, rec.rtt_ms, rec.clients, rec.contention))
        if few:
            at = where(rec.rtt_ms, rec.clients, rec.contention)
            text = (
                f"{rec.operation} {at}: too few samples to recommend a form "
                f"({', '.join(few)}; at least {MIN_CALLS} each are needed): "
                "run longer (--duration) or at a higher --rate."
            )
            rec = replace(
                rec,
                form=None,
                text=text,
                reasons=(text, *rec.reasons),
                headline=text,
                tied_with=(),
                tie_within_pct=None,
                tie_break=None,
                alternative=None,
                ratio=None,
                ratio_interval=None,
                beats=None,
                beats_by=None,
                beats_ratio=None,
                beats_ratio_interval=None,
                ratio_rounds=None,
                ratio_coverage=None,
                main_reason="too few samples",
                status="too few samples",
                decided=False,
                comparisons=(),
                policy=None,
                would_decide=f"at least {MIN_CALLS} calls of each form (--duration)",
            )
        out.append(rec.as_dict())
    return out
