"""Which form to use, from benchmark records (the JSON ``records`` list): one
:class:`Recommendation` per point (operation, nominal RTT, clients, contention).

Each point is decided by :func:`~luapipe.bench.verdict.decide.decide` (the forms at stake,
three outcomes at one margin, the policy among equivalents) and put into words by
:func:`~luapipe.bench.verdict.reasons.explain`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from luapipe.bench.verdict.compare import MARGIN_PCT
from luapipe.bench.verdict.decide import decide
from luapipe.bench.verdict.reasons import explain

__all__ = ["Recommendation", "point_of", "recommend"]


@dataclass(frozen=True)
class Recommendation:
    """The verdict at one point. ``status`` says what kind of answer ``form`` is:

    - ``ahead``: ``form`` is ahead of every other form at stake beyond the margin;
    - ``equivalent``: the data calls ``form`` equivalent to ``tied_with`` (and ahead of the
      rest); the stated policy (``policy``) picked it;
    - ``inconclusive``: at least one of ``form``'s comparisons is neither (``decided`` is
      False); ``form`` stands only by the policy, ``would_decide`` says what would settle it;
    - ``only``: the only form at stake that ran correctly;
    - ``none``: no form at stake ran correctly (``form`` is None);
    - ``too few samples``: a form completed too few calls (``form`` is None).

    ``comparisons`` are ``form`` against each other form at stake, the best first, each with
    its own ratio, interval, outcome and words; ``alternative``/``ratio``/``ratio_interval``
    repeat the first of them (the best alternative), ``beats``/``beats_ratio`` the best form
    it is ahead of. ``tie_within_pct`` is the widest "+-x%" among the equivalent pairs.
    """

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
    noise_threshold_pct: float = MARGIN_PCT
    alternative: str | None = None
    ratio: float | None = None
    ratio_interval: tuple[float, float] | None = None
    beats: str | None = None  # the best form at stake it is ahead of
    beats_by: str | None = None  # whose ratio beats_ratio is: always the form itself
    beats_ratio: float | None = None
    beats_ratio_interval: tuple[float, float] | None = None
    ratio_rounds: int | None = None  # paired rounds the ratio comes from
    ratio_coverage: float | None = None  # of ratio_interval (median of the rounds' ratios)
    rule: str = ""  # the decision rule and the interval method, in words
    non_atomic: tuple[dict[str, Any], ...] = ()
    main_reason: str = ""
    # the three outcomes (issue 19)
    status: str = ""
    decided: bool = False
    figure: str = "ops_per_sec"  # ops_per_sec | cpu_us_per_op | p50_ms: what decided
    figure_name: str = "throughput"
    margin_pct: float = MARGIN_PCT
    comparisons: tuple[dict[str, Any], ...] = ()
    policy: str | None = None  # "function by policy: ..." when the policy picked the form
    would_decide: str = ""  # inconclusive: what would decide it
    server_cpu: str = ""  # server CPU per op of the forms at stake, when > 1.5x apart
    contention: str = "spread"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Point = tuple[str, float, int, str]


def point_of(r: dict[str, Any]) -> Point:
    """The point a record belongs to: operation, nominal RTT, clients, contention."""
    return (
        str(r["operation"]),
        float(r["rtt_ms_nominal"]),
        int(r["clients"]),
        str(r.get("contention") or "spread"),
    )


def recommend(
    records: Sequence[dict[str, Any]],
    skipped: Sequence[dict[str, str]] | None = None,
    *,
    margin_pct: float = MARGIN_PCT,
) -> list[Recommendation]:
    """One recommendation per point of ``records`` (see :func:`point_of`).

    ``skipped`` (the results' ``skipped`` list: operation, form, reason) names forms that
    could not run at all here, such as atomic forms whose keys span cluster slots.
    """
    groups: dict[Point, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[point_of(r)].append(r)
    crowded = {p[0] for p in groups if p[2] > 1 and p[3] != "spread"}
    out = []
    for (op, rtt, clients, contention), rows in groups.items():
        mine = [s for s in skipped or () if s.get("operation") == op]
        v = decide(rows, mine, margin_pct)
        fields = explain(op, rtt, clients, v, contention, races_shown=op in crowded)
        out.append(Recommendation(operation=op, rtt_ms=rtt, clients=clients, **fields))
    return out
