"""Comparing forms at one point: per-round figures, ratios, the tie-break order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from luapipe.bench.intervals import Ratio, ratio_of

__all__ = [
    "ATOMIC",
    "MOVING_PARTS",
    "Verdict",
    "open_loop_of",
    "point",
    "ratio",
    "series",
    "tie_key",
]

ATOMIC = frozenset({"transaction", "script", "function", "auto script", "auto function"})
#: tie-break after atomicity: survives a failover with fewer moving parts (lower is better):
#: a function is one call and is replicated and persisted; a transaction survives a failover
#: too but runs a WATCH retry loop; a script needs each node's cache, lost on failover
MOVING_PARTS = {"naive": 0, "pipelined": 0, "function": 0, "transaction": 1, "script": 2}
MOVING_PARTS.update({f"auto {f}": n for f, n in list(MOVING_PARTS.items()) if f != "transaction"})


@dataclass
class Verdict:
    """What :func:`luapipe.bench.recommend.decide` found at one point."""

    kind: str
    at_stake: tuple[str, ...]
    open_loop: bool
    rows: list[dict[str, Any]]
    ruled_out: list[str]
    chosen: dict[str, Any] | None = None
    best: dict[str, Any] | None = None  # the best by the figure (chosen may win a tie-break)
    tied: list[dict[str, Any]] = field(default_factory=list)  # within noise of best
    others: list[dict[str, Any]] = field(default_factory=list)  # valid, at stake, best first


def open_loop_of(rows: Sequence[dict[str, Any]]) -> bool:
    return any(r.get("rate") for r in rows)


def series(r: dict[str, Any], open_loop: bool) -> list[float | None]:
    """Per-round figure where more is better: ops/s, or 1 / p50 in the open loop."""
    rounds = r.get("rounds") or []
    if open_loop:
        vals = [x.get("p50") for x in rounds] or [r["latency_ms"].get("p50")]
        return [1.0 / float(v) if v else None for v in vals]
    return [x.get("ops_per_sec") for x in rounds] or [float(r["ops_per_sec"])]


def point(r: dict[str, Any], open_loop: bool) -> float:
    if open_loop:
        p50 = r["latency_ms"].get("p50")
        return 1.0 / float(p50) if p50 else 0.0
    return float(r["ops_per_sec"])


def ratio(a: dict[str, Any], b: dict[str, Any], open_loop: bool) -> Ratio | None:
    return ratio_of(series(a, open_loop), series(b, open_loop))


def tie_key(r: dict[str, Any]) -> tuple[int, int, float]:
    return (
        0 if r["form"] in ATOMIC else 1,
        MOVING_PARTS.get(str(r["form"]), 3),
        float(r.get("server_usec_per_op") or 0.0),
    )
