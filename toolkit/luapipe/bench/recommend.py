"""Which form to use, from benchmark records (the JSON ``records`` list): the verdict.

For each (operation, RTT, clients) point the verdict answers the question actually at stake:

- an operation whose writes depend on its reads (``read_compute_write``) needs atomicity,
  so the choice is between the atomic forms: transaction, script, function. What the
  non-atomic forms would gain, and what they lost (measured lost updates), is stated beside;
- one whose writes do not (update_token) or that only reads: pipelined vs script vs
  function (plain commands in one round trip against server-side code).

Forms are ranked by throughput (closed loop) or by p50 latency at the fixed rate (open
loop, ``--rate``). One beats another only when the interval of the median of their
per-round ratios (:func:`~luapipe.bench.intervals.ratio_of`: ahead by more than
:data:`~luapipe.bench.intervals.NOISE_PCT` in at least 9 of 10 rounds) clears the noise
threshold; otherwise they tie, and the tie-break
picks: atomic over non-atomic, then the form that survives a failover with fewer moving
parts (transaction: nothing deployed; function: replicated and persisted; script: a
per-node cache lost on restart or failover), then the lower server CPU. The headline
compares the winner with the best other form at stake, never with naive calls.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from luapipe.bench.compare import (
    ATOMIC,
    MOVING_PARTS,
    Verdict,
    open_loop_of,
    point,
    ratio,
    tie_key,
)
from luapipe.bench.intervals import NOISE_PCT
from luapipe.bench.reasons import explain

__all__ = ["ATOMIC", "MOVING_PARTS", "Recommendation", "at_stake", "recommend"]

_AT_STAKE = {  # the auto-pipelined variants run only with --tasks > 1
    "read_compute_write": ("transaction", "script", "function", "auto script", "auto function"),
    "blind_writes": ("pipelined", "script", "function", "auto pipelined", "auto script",
                     "auto function"),
    "read_only": ("pipelined", "script", "function", "auto pipelined", "auto script",
                  "auto function"),
}  # fmt: skip


@dataclass(frozen=True)
class Recommendation:
    operation: str
    rtt_ms: float
    clients: int
    form: str | None
    text: str
    reasons: tuple[str, ...]
    headline: str = ""
    question: str = ""
    kind: str = "other"
    at_stake: tuple[str, ...] = ()
    metric: str = "ops_per_sec"
    tied_with: tuple[str, ...] = ()
    tie_within_pct: float | None = None
    tie_break: str | None = None
    noise_threshold_pct: float = NOISE_PCT
    alternative: str | None = None
    ratio: float | None = None
    ratio_interval: tuple[float, float] | None = None
    beats: str | None = None  # the best form at stake it clearly beats (past any tie)
    beats_by: str | None = None  # whose ratio beats_ratio is: the form, or one tied with it
    beats_ratio: float | None = None
    beats_ratio_interval: tuple[float, float] | None = None
    ratio_rounds: int | None = None  # paired rounds the ratio comes from
    ratio_coverage: float | None = None  # of ratio_interval (median of the rounds' ratios)
    rule: str = ""  # when a form beats another here, in words
    non_atomic: tuple[dict[str, Any], ...] = ()
    main_reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kind_of(rows: Sequence[dict[str, Any]]) -> str:
    """read_compute_write, blind_writes, read_only, or other (from the records' flags)."""
    if any(r.get("read_compute_write") for r in rows):
        return "read_compute_write"
    declared = [r.get("write_share_declared") for r in rows]
    if declared and all(d is not None and float(d) == 0.0 for d in declared):
        return "read_only"
    return "blind_writes"


def at_stake(kind: str, forms: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """``(kind, forms at stake)``. A read-compute-write operation: its atomic forms that
    ran (even one, even none: a non-atomic form is never the answer). Otherwise the
    preferred set where at least two of them ran, else every form that ran ("other")."""
    wanted = tuple(f for f in _AT_STAKE.get(kind, ()) if f in forms)
    if len(wanted) >= 2 or kind == "read_compute_write":
        return kind, wanted
    return "other", tuple(forms)


def _usable(r: dict[str, Any]) -> str | None:
    """Why ``r`` cannot be recommended, or None."""
    if not r["invariant_ok"]:
        lost = int(r.get("lost_updates") or 0)
        return f"{r['form']} lost updates ({r.get('invariant_detail') or f'{lost} cases'})"
    if r["ops"] == 0:
        return f"{r['form']} failed: every call returned an error"
    return None


def _beats(a: dict[str, Any], b: dict[str, Any], open_loop: bool) -> bool:
    """``a`` is better than ``b`` beyond noise (the interval of their ratio clears it)."""
    x = ratio(a, b, open_loop)
    return x is not None and x.beats()


def decide(rows: list[dict[str, Any]], skipped: Sequence[dict[str, str]]) -> Verdict:
    """The verdict of one point, before it is put into words."""
    forms = [str(r["form"]) for r in rows]
    kind, stake = at_stake(kind_of(rows), forms)
    open_loop = open_loop_of(rows)
    ruled = [why for r in rows if r["form"] in stake and (why := _usable(r)) is not None]
    ruled += [f"{s['form']} could not run here: {s['reason']}" for s in skipped]
    valid = [r for r in rows if r["form"] in stake and _usable(r) is None]
    v = Verdict(kind=kind, at_stake=stake, open_loop=open_loop, rows=rows, ruled_out=ruled)
    if not valid:
        return v
    best = max(valid, key=lambda r: point(r, open_loop))
    beaten = {id(r) for r in valid for o in valid if o is not r and _beats(o, r, open_loop)}
    candidates = [r for r in valid if id(r) not in beaten] or [best]
    chosen = min(candidates, key=tie_key)
    others = sorted((r for r in valid if r is not chosen), key=lambda r: -point(r, open_loop))
    v.chosen, v.best = chosen, best
    v.tied = [r for r in candidates if r is not chosen]
    v.others = others
    return v


def recommend(
    records: list[dict[str, Any]], skipped: list[dict[str, str]] | None = None
) -> list[Recommendation]:
    """One recommendation per (operation, nominal RTT, clients) in ``records``.

    ``skipped`` (the results' ``skipped`` list: operation, form, reason) names forms that
    could not run at all here, such as atomic forms whose keys span cluster slots.
    """
    groups: dict[tuple[str, float, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(str(r["operation"]), float(r["rtt_ms_nominal"]), int(r["clients"]))].append(r)
    out = []
    for (op, rtt, clients), rows in groups.items():
        mine = [s for s in skipped or () if s.get("operation") == op]
        fields = explain(op, rtt, clients, decide(rows, mine))
        out.append(Recommendation(operation=op, rtt_ms=rtt, clients=clients, **fields))
    return out
