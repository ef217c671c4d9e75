"""The top of the report: per operation, the choice at stake and, at each point measured,
the winner or the tie with its interval and the one main reason.

It renders what the verdict computed (``recommendations[]``: question, tied_with, ratio,
ratio_interval, main_reason, non_atomic...); for a results file written before those fields
existed it falls back to what such a file has (the form, the first reason).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Card", "NonAtomic", "Point", "operation_cards", "share_text"]

ATOMIC = ("transaction", "script", "function")
WHY = {
    "read_compute_write": "its writes depend on its reads, so only an atomic form is safe "
    "when clients meet on a key",
    "blind_writes": "its writes do not depend on its reads, so a pipeline loses no update",
    "read_only": "it only reads",
}


@dataclass(frozen=True)
class NonAtomic:
    """What a non-atomic form would gain, and what it lost, in one line."""

    form: str
    text: str  # "pipelined: 1.1x the winner's throughput, lost updates in 12 of 64 cases"
    lost: bool
    lost_text: str = ""  # "pipelined lost updates in 12 of 64 cases" when it lost any


@dataclass(frozen=True)
class Point:
    """One (RTT, clients) point of an operation's verdict."""

    where: str  # "RTT 0.25 ms" (", 4 clients" when several counts were measured)
    form: str | None  # None: no recommendation (see text)
    tied: tuple[str, ...]  # the forms the data calls equivalent to it
    tie: str  # older files: "tie within ±3%" (and the tie-break) or ""
    versus: str  # older files: "1.9x the throughput of transaction"
    interval: str  # older files: "95%: 1.7-2.1x" or ""
    reason: str  # the one main reason
    non_atomic: tuple[NonAtomic, ...]
    #: ahead | equivalent | inconclusive | only | none | too few samples | "" (older files)
    status: str = ""
    comparisons: tuple[str, ...] = ()  # the form against each other form at stake, in words
    policy: str = ""  # "function by policy: ..." when the policy picked it
    would_decide: str = ""  # inconclusive: what would decide it
    server_cpu: str = ""  # server CPU per op of the forms at stake, when far apart
    figure: str = ""  # what decided: "p50 latency", "client + server CPU per op"...
    #: "ruled out: script lost updates in 5 of 64 cases": a form at stake left out, and why
    ruled_out: tuple[str, ...] = ()
    single_client: bool = False  # no two calls met on a key: races could not show

    @property
    def decided(self) -> bool:
        return self.status in ("ahead", "equivalent", "only")

    @property
    def non_atomic_summary(self) -> str:
        """The non-atomic forms in one line: what they lost, or why nothing could be seen."""
        lost = [n.lost_text for n in self.non_atomic if n.lost]
        if lost:
            return "; ".join(lost)
        forms = ", ".join(n.form for n in self.non_atomic)
        if not forms:
            return ""
        if self.single_client:
            return f"non-atomic {forms}: one client cannot show a race"
        return f"non-atomic {forms}: no lost update seen here"

    @property
    def non_atomic_lost(self) -> bool:
        return any(n.lost for n in self.non_atomic)


@dataclass(frozen=True)
class Card:
    operation: str
    question: str  # "transaction vs script vs function"
    why: str  # why that is the choice at stake
    points: tuple[Point, ...]


def _x(v: float) -> str:
    return f"{v:.3g}x"


def _pct_text(pct: float) -> str:
    """A percentage as people write it: 3.1%, 12%, 300%."""
    return f"{pct:.2g}%" if abs(pct) < 10 else f"{pct:.0f}%"


def _pct(share: Any) -> str:
    return f"{100 * float(share):.0f}%"


def _versus(rec: dict[str, Any]) -> tuple[str, str]:
    """The winner against the best other form at stake; in a tie (the tie line already
    gives that ratio) against the best form it clearly beats, when there is one."""
    ratio, alt, iv = rec.get("ratio"), rec.get("alternative"), rec.get("ratio_interval")
    by = ""
    if rec.get("tied_with") and rec.get("beats") and rec.get("beats_ratio") is not None:
        ratio, alt, iv = rec["beats_ratio"], rec["beats"], rec.get("beats_ratio_interval")
        if rec.get("beats_by") and rec["beats_by"] != rec.get("form"):
            by = f"{rec['beats_by']}: "  # only a form it ties with is clearly ahead of alt
    if ratio is None or not alt:
        return "", ""
    if rec.get("metric") == "p50_ms":  # ratio: the other's p50 over this one's
        r = float(ratio)
        text = f"{_x(r)} lower p50 than {alt}" if r >= 1 else f"{_x(1 / r)} higher p50 than {alt}"
    else:
        text = f"{_x(float(ratio))} the throughput of {alt}"
    text = by + text
    cover = rec.get("ratio_coverage")
    pct = f"{float(cover):.0%}" if cover is not None else "95%"
    interval = f"{pct}: {float(iv[0]):.3g}-{_x(float(iv[1]))}" if iv and None not in iv else ""
    return text, interval


def _non_atomic(rec: dict[str, Any]) -> tuple[NonAtomic, ...]:
    out = []
    what = "p50 speed" if rec.get("metric") == "p50_ms" else "throughput"
    for n in rec.get("non_atomic") or ():
        form = str(n["form"])
        lost, cases = int(n.get("lost_updates") or 0), n.get("invariant_cases")
        broke = bool(lost) or n.get("invariant_ok") is False
        of = f" of {cases}" if cases else ""
        lost_text = f"{form} lost updates in {lost}{of} cases" if lost else ""
        if broke and not lost:
            lost_text = f"{form} broke the invariant"
        if n.get("text"):  # the verdict's own sentence
            out.append(NonAtomic(form, str(n["text"]), broke, lost_text))
            continue
        ratio = n.get("ratio")
        gain = f"{_x(float(ratio))} the winner's {what}" if ratio is not None else "not timed"
        if broke:
            loss = f"lost updates in {lost}{of} cases" if lost else "broke the invariant"
        else:
            loss = f"no lost update seen{f' in {cases} cases' if cases else ''}"
        out.append(NonAtomic(form, f"{form}: {gain}, {loss}", broke, lost_text))
    return tuple(out)


def _tie(rec: dict[str, Any], reason: str) -> str:
    """ "tie within ±x%", and the tie-break when the main reason is not already it (the
    tied forms themselves are shown beside the winner)."""
    if not rec.get("tied_with"):
        return ""
    within = rec.get("tie_within_pct")
    head = f"tie within ±{_pct_text(float(within))}" if within is not None else "tie"
    rule = rec.get("tie_break")
    return head + (f"; tie-break: {rule}" if rule and rule not in reason else "")


def _where(rec: dict[str, Any], several_counts: bool) -> str:
    """ "RTT 0.25 ms", with the clients when several counts were measured or the keys were
    not spread ("RTT 0 ms, 4 clients, hot keys")."""
    c = int(rec["clients"])
    contention = str(rec.get("contention") or "spread")
    parts = [f"RTT {float(rec['rtt_ms']):g} ms"]
    if several_counts or contention != "spread":
        parts.append(f"{c} client{'s' if c != 1 else ''}")
    if contention == "hot":
        parts.append("hot keys")
    elif contention != "spread":
        parts.append(f"keys {contention}")
    return ", ".join(parts)


def _point(rec: dict[str, Any], several_counts: bool) -> Point:
    versus, interval = _versus(rec)
    reasons = rec.get("reasons") or []
    reason = str(rec.get("main_reason") or (reasons[0] if reasons else rec.get("text", "")))
    if rec.get("form") is None:
        reason = str(rec.get("text") or reason)
    status = str(rec.get("status") or "")
    return Point(
        where=_where(rec, several_counts),
        form=rec.get("form"),
        tied=tuple(rec.get("tied_with") or ()),
        tie="" if status else _tie(rec, reason),
        versus="" if status else versus,
        interval="" if status else interval,
        reason=str(reason),
        non_atomic=_non_atomic(rec),
        status=status,
        comparisons=tuple(str(c.get("text") or "") for c in rec.get("comparisons") or ()),
        policy=str(rec.get("policy") or ""),
        would_decide=str(rec.get("would_decide") or ""),
        server_cpu=str(rec.get("server_cpu") or ""),
        figure=str(rec.get("figure_name") or ""),
        ruled_out=tuple(str(x) for x in reasons if str(x).startswith("ruled out: ")),
        # one client, one call at a time: older files have no calls_met, only the clients
        single_client=int(rec.get("clients") or 1) == 1
        and not any(n.get("calls_met") for n in rec.get("non_atomic") or ()),
    )


def _question(recs: list[dict[str, Any]], rows: list[dict[str, Any]]) -> tuple[str, str]:
    """The choice at stake and why: from the verdict, else from the records' flags."""
    for rec in recs:
        if rec.get("question"):
            return str(rec["question"]), WHY.get(str(rec.get("kind")), "")
    forms = list(dict.fromkeys(str(r["form"]) for r in rows))
    if any(r.get("read_compute_write") for r in rows):
        stake, kind = [f for f in forms if f in ATOMIC], "read_compute_write"
    else:
        stake, kind = [f for f in forms if f != "naive"], ""
    return " vs ".join(stake or forms), WHY.get(kind, "")


def operation_cards(
    records: Iterable[dict[str, Any]], recommendations: Iterable[dict[str, Any]]
) -> list[Card]:
    """One card per operation, in the order the records name them."""
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        rows[str(r["operation"])].append(r)
    recs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in recommendations:
        recs[str(rec["operation"])].append(rec)
    cards = []
    for op, op_rows in rows.items():
        mine = sorted(recs.get(op, []), key=lambda x: (int(x["clients"]), float(x["rtt_ms"])))
        several = len({int(x["clients"]) for x in mine}) > 1
        question, why = _question(mine, op_rows)
        cards.append(Card(op, question, why, tuple(_point(x, several) for x in mine)))
    return cards


def share_text(record: dict[str, Any]) -> str:
    """The measured share of calls that wrote, with the declared one when it differs."""
    share = record.get("write_share")
    if share is None:
        return "-"
    declared = record.get("write_share_declared")
    if declared is not None and record.get("write_share_off"):
        return f"{_pct(share)} (declared {_pct(declared)})"
    return _pct(share)
